package engine_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine/enginetest"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// relayConn is the client end of a relay: the TCP connection, read through the buffer that
// parsed the 101.
type relayConn struct {
	*net.TCPConn
	r *bufio.Reader
}

func (c *relayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// upgrade writes a relay request (plus early bytes right behind it) and parses the answer.
func upgrade(t *testing.T, h *harness, path, token string, headers bool, early string) (*relayConn, *http.Response) {
	t.Helper()
	u, _ := url.Parse(h.srv.URL)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	req := "GET " + path + " HTTP/1.1\r\nHost: engine\r\n"
	if token != "" {
		req += "Authorization: Bearer " + token + "\r\n"
	}
	if headers {
		req += "Upgrade: tcp\r\nConnection: Upgrade\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"+early); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	rc := &relayConn{TCPConn: c.(*net.TCPConn), r: bufio.NewReader(c)}
	resp, err := http.ReadResponse(rc.r, nil)
	if err != nil {
		t.Fatalf("read relay answer: %v", err)
	}
	return rc, resp
}

func relayRaw(t *testing.T, h *harness, path, token string) (int, []byte) {
	t.Helper()
	c, resp := upgrade(t, h, path, token, true, "")
	defer c.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func relayStatus(t *testing.T, h *harness, id string, port int, token string) int {
	t.Helper()
	code, _ := relayRaw(t, h, fmt.Sprintf("/v1/sandboxes/%s/ports/%d", id, port), token)
	return code
}

// dialRelay opens a relay that must answer 101.
func dialRelay(t *testing.T, h *harness, id string, port int, token string) *relayConn {
	t.Helper()
	c, resp := upgrade(t, h, fmt.Sprintf("/v1/sandboxes/%s/ports/%d", id, port), token, true, "")
	if resp.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(resp.Header.Get("Upgrade"), "tcp") {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("relay: %d %s", resp.StatusCode, body)
	}
	return c
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("echo %q: %q %v", msg, buf, err)
	}
}

// TestRelayEcho: 101, then a byte pipe to a real TCP server in the box. Bytes sent right
// behind the request arrive first; a client half-close reaches the box and the box's answer
// and its own half-close come back.
func TestRelayEcho(t *testing.T) {
	h := newHarness(t)
	if err := h.rt.ServePort(7, echo); err != nil {
		t.Fatal(err)
	}
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	c, resp := upgrade(t, h, "/v1/sandboxes/"+sb.ID+"/ports/7", sb.Token, true, "early|")
	defer c.Close()
	if resp.StatusCode != 101 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	big := strings.Repeat("0123456789", 100_000)
	go func() {
		_, _ = io.WriteString(c, big)
		_ = c.CloseWrite() // the echo server sees EOF only through the relay's half-close
	}()
	got, err := io.ReadAll(c) // EOF arrives only when the box closes its side
	if err != nil || string(got) != "early|"+big {
		t.Fatalf("echo: %d bytes, err %v", len(got), err)
	}
	testutil.Eventually(t, testutil.WaitShort, "the relay to close in the box", func() bool { return h.rt.OpenConns(sb.ID) == 0 })
}

// TestRelayHalfCloseFromBox: the box closes its write side first; the client sees EOF and can
// still send, and the box receives it.
func TestRelayHalfCloseFromBox(t *testing.T) {
	h := newHarness(t)
	received := make(chan string, 1)
	if err := h.rt.ServePort(8, func(c net.Conn) {
		defer c.Close()
		_, _ = io.WriteString(c, "banner")
		_ = c.(*net.TCPConn).CloseWrite()
		data, _ := io.ReadAll(c)
		received <- string(data)
	}); err != nil {
		t.Fatal(err)
	}
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	c := dialRelay(t, h, sb.ID, 8, sb.Token)
	defer c.Close()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "banner" {
		t.Fatalf("read to EOF: %q %v", got, err)
	}
	if _, err := io.WriteString(c, "after your EOF"); err != nil {
		t.Fatal(err)
	}
	_ = c.CloseWrite()
	select {
	case msg := <-received:
		if msg != "after your EOF" {
			t.Fatalf("box received %q", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the box never received the client's bytes")
	}
}

// TestRelayUpgradeRequired: a bare GET is 426 and does not wake a hibernated sandbox; an
// upgrade does.
func TestRelayUpgradeRequired(t *testing.T) {
	h := newHarness(t)
	if err := h.rt.ServePort(7, echo); err != nil {
		t.Fatal(err)
	}
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	h.must(204, "POST", "/v1/sandboxes/"+sb.ID+"/hibernate", sb.Token, nil)
	wakes := h.rt.Calls(enginetest.OpWake)
	for _, tc := range []struct {
		name    string
		headers bool
		token   string
	}{{"bare GET", false, sb.Token}, {"bare GET without a token", false, ""}} {
		c, resp := upgrade(t, h, "/v1/sandboxes/"+sb.ID+"/ports/7", tc.token, tc.headers, "")
		body, _ := io.ReadAll(resp.Body)
		c.Close()
		if resp.StatusCode != http.StatusUpgradeRequired || resp.Header.Get("Upgrade") != "tcp" || !strings.Contains(errorOf(t, body), "Upgrade: tcp") {
			t.Fatalf("%s: %d %v %s", tc.name, resp.StatusCode, resp.Header, body)
		}
	}
	if h.rt.Calls(enginetest.OpWake) != wakes || h.rt.BoxState(sb.ID) != runtime.StateHibernated {
		t.Fatal("a bare GET woke the sandbox")
	}
	c := dialRelay(t, h, sb.ID, 7, sb.Token)
	defer c.Close()
	roundTrip(t, c, "woken")
	if h.row(sb.ID).Hibernated {
		t.Fatal("the relay did not wake the sandbox")
	}
	if code := relayStatus(t, h, sb.ID, 9, sb.Token); code != http.StatusBadGateway {
		t.Fatalf("relay to a closed port: %d", code)
	}
}

// TestHibernateClosesRelays: hibernate closes open relays first — the fake, like runsc,
// refuses to checkpoint a box with open host sockets — and the client sees its pipe end.
func TestHibernateClosesRelays(t *testing.T) {
	h := newHarness(t)
	if err := h.rt.ServePort(7, echo); err != nil {
		t.Fatal(err)
	}
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	c1 := dialRelay(t, h, sb.ID, 7, sb.Token)
	c2 := dialRelay(t, h, sb.ID, 7, sb.Token)
	defer c1.Close()
	defer c2.Close()
	roundTrip(t, c1, "one")
	h.must(204, "POST", "/v1/sandboxes/"+sb.ID+"/hibernate", sb.Token, nil)
	for _, c := range []*relayConn{c1, c2} {
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("relay after hibernate: %v", err)
		}
	}
	if h.rt.BoxState(sb.ID) != runtime.StateHibernated || h.rt.OpenConns(sb.ID) != 0 {
		t.Fatal("hibernate with relays open")
	}
	// Release closes them too.
	h.must(204, "POST", "/v1/sandboxes/"+sb.ID+"/wake", sb.Token, nil)
	c3 := dialRelay(t, h, sb.ID, 7, sb.Token)
	defer c3.Close()
	h.must(204, "POST", "/v1/sandboxes/"+sb.ID+"/release", sb.Token, nil)
	if _, err := io.ReadAll(c3); err != nil {
		t.Fatalf("relay after release: %v", err)
	}
}
