package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc/codes"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/rfb"
	"github.com/loomhand/cocoonbox/internal/secrets"
)

const testBox = cocoonbox.BoxID("bx_0123456789abcdef")

func testKeys(t *testing.T) *secrets.Keyring {
	t.Helper()
	k, err := ephemeralKeyring()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// ticketFor is a fresh ticket for u_1 on testBox in mode, expiring at exp.
func ticketFor(t *testing.T, mode string, exp time.Time) desktopTicket {
	t.Helper()
	tk, err := newTicket(testBox, "u_1", "tok_1", mode, exp.Add(-ticketTTL))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestTicketSealOpen(t *testing.T) {
	keys := testKeys(t)
	now := time.Now()
	in := ticketFor(t, modeControl, now.Add(ticketTTL))
	s, err := sealTicket(keys, in)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(s, "+/=") || strings.Contains(s, "u_1") {
		t.Fatalf("ticket %q is not opaque base64url", s)
	}
	out, err := openTicket(keys, s, now)
	if err != nil || out != in || len(out.ID) != 32 {
		t.Fatalf("open = %+v, %v; want %+v", out, err, in)
	}
	if again, _ := sealTicket(keys, in); again == s {
		t.Fatal("two seals of one ticket are equal: the nonce is not fresh")
	}
	if p := desktopPath(testBox, modeView, s); p != "/v1/boxes/"+string(testBox)+"/desktop?mode=view&ticket="+s {
		t.Fatalf("desktopPath = %q", p)
	}
}

func TestTicketExpiry(t *testing.T) {
	keys := testKeys(t)
	exp := time.Now().Add(ticketTTL)
	s, err := sealTicket(keys, ticketFor(t, modeView, exp))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openTicket(keys, s, exp.Add(-time.Millisecond)); err != nil {
		t.Fatalf("just before expiry: %v", err)
	}
	for _, at := range []time.Time{exp, exp.Add(time.Hour)} {
		_, err := openTicket(keys, s, at)
		if cocoonbox.ErrorCode(err) != cocoonbox.EUnauthorized || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("at %v: %v, want unauthorized (expired)", at.Sub(exp), err)
		}
	}
}

func TestTicketForgery(t *testing.T) {
	keys := testKeys(t)
	now := time.Now()
	good := ticketFor(t, modeView, now.Add(ticketTTL))
	s, err := sealTicket(keys, good)
	if err != nil {
		t.Fatal(err)
	}
	blob, _ := base64.RawURLEncoding.DecodeString(s)
	refused := func(name, ticket string) {
		t.Helper()
		if _, err := openTicket(keys, ticket, now); cocoonbox.ErrorCode(err) != cocoonbox.EUnauthorized {
			t.Errorf("%s: %v, want unauthorized", name, err)
		}
	}
	for i := range blob {
		b := bytes.Clone(blob)
		b[i] ^= 0x01
		refused("flipped byte", base64.RawURLEncoding.EncodeToString(b))
	}
	refused("truncated", base64.RawURLEncoding.EncodeToString(blob[:len(blob)-1]))
	refused("not base64", s+"!")
	refused("empty", "")

	raw, _ := json.Marshal(good)
	other, _ := keys.Seal(raw, []byte("sandbox-token:"+string(testBox)))
	refused("other aad", base64.RawURLEncoding.EncodeToString(other))
	foreign, _ := sealTicket(testKeys(t), good)
	refused("other key", foreign)

	// A ticket the keyring sealed but whose content is not a valid ticket.
	for _, bad := range []desktopTicket{
		{ID: good.ID, Box: testBox, User: "u_1", Mode: "admin", Expires: good.Expires},
		{ID: good.ID, Box: testBox, Mode: modeView, Expires: good.Expires},
		{ID: good.ID, User: "u_1", Mode: modeView, Expires: good.Expires},
		{Box: testBox, User: "u_1", Mode: modeView, Expires: good.Expires}, // no ID: it could not be spent
	} {
		s, _ := sealTicket(keys, bad)
		refused("bad content "+bad.Mode, s)
	}
}

// TestDesktopCallerTicket checks what the edge makes of a ticket: it must name the path's box
// and mode.
func TestDesktopCallerTicket(t *testing.T) {
	keys := testKeys(t)
	s := New(Options{Keys: keys})
	in := ticketFor(t, modeView, time.Now().Add(ticketTTL))
	ticket, _ := sealTicket(keys, in)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if u, tok, got, err := s.desktopCaller(r, testBox, modeView, ticket); err != nil || u != "u_1" || tok != "tok_1" || got == nil || *got != in {
		t.Fatalf("good ticket: %q, %q, %+v, %v", u, tok, got, err)
	}
	if _, _, _, err := s.desktopCaller(r, "bx_ffffffffffffffff", modeView, ticket); cocoonbox.ErrorCode(err) != cocoonbox.EUnauthorized {
		t.Fatalf("other box: %v, want unauthorized", err)
	}
	if _, _, _, err := s.desktopCaller(r, testBox, modeControl, ticket); cocoonbox.ErrorCode(err) != cocoonbox.EForbidden {
		t.Fatalf("view ticket for control: %v, want forbidden", err)
	}
	if _, _, _, err := s.desktopCaller(r, testBox, modeView, ""); cocoonbox.ErrorCode(err) != cocoonbox.EUnauthorized {
		t.Fatalf("no credential: %v, want unauthorized", err)
	}
}

// TestServeDesktopRefusals checks the refusals answered before the upgrade, as JSON errors.
func TestServeDesktopRefusals(t *testing.T) {
	keys := testKeys(t)
	srv := httptest.NewServer(New(Options{Keys: keys}).Handler())
	t.Cleanup(srv.Close)
	ticket, _ := sealTicket(keys, ticketFor(t, modeView, time.Now().Add(ticketTTL)))
	expired, _ := sealTicket(keys, ticketFor(t, modeView, time.Now().Add(-time.Second)))
	base := srv.URL + "/v1/boxes/" + string(testBox) + "/desktop"
	for _, c := range []struct {
		name, url, origin string
		upgrade           bool
		status            int
		code              string
	}{
		{"no upgrade", base + "?ticket=" + ticket, "", false, 400, cocoonbox.EInvalid},
		{"bad box", srv.URL + "/v1/boxes/nope/desktop?ticket=" + ticket, "", true, 400, cocoonbox.EInvalid},
		{"bad mode", base + "?mode=drive&ticket=" + ticket, "", true, 400, cocoonbox.EInvalid},
		{"no credential", base, "", true, 401, cocoonbox.EUnauthorized},
		{"forged", base + "?ticket=AAAA" + ticket[4:], "", true, 401, cocoonbox.EUnauthorized},
		{"expired", base + "?ticket=" + expired, "", true, 401, cocoonbox.EUnauthorized},
		{"mode mismatch", base + "?mode=control&ticket=" + ticket, "", true, 403, cocoonbox.EForbidden},
		{"foreign origin", base + "?ticket=" + ticket, "https://evil.example", true, 403, cocoonbox.EForbidden},
		{"no boxes here", base + "?ticket=" + ticket, srv.URL, true, 503, cocoonbox.EUnavailable},
	} {
		req, _ := http.NewRequest(http.MethodGet, c.url, nil)
		if c.upgrade {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct{ Code, Message string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		if resp.StatusCode != c.status || body.Error.Code != c.code {
			t.Errorf("%s: %d %+v, want %d %s", c.name, resp.StatusCode, body.Error, c.status, c.code)
		}
	}
}

// fakeDesktop is the box's end of a relay: a TCP pair, so the edge's end can half-close.
func fakeDesktop(t *testing.T) (edge boxsvc.Conn, box net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	box = <-accepted
	t.Cleanup(func() { _ = c.Close(); _ = box.Close() })
	return c.(*net.TCPConn), box
}

// relayServer serves one WebSocket that relays to edge in mode; the returned channel gets the
// close status the relay sent.
func relayServer(t *testing.T, edge boxsvc.Conn, mode rfb.Mode) (string, <-chan websocket.StatusCode) {
	done := make(chan websocket.StatusCode, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
		if err != nil {
			return
		}
		code, _ := relayDesktop(r.Context(), ws, edge, mode, func(context.Context) error { return nil })
		done <- code
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http"), done
}

// TestRelayDesktopView relays a view session: the server's bytes arrive untouched, the client's
// are filtered (shared forced, input dropped).
func TestRelayDesktopView(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	edge, box := fakeDesktop(t)
	u, done := relayServer(t, edge, rfb.View)
	ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if ws.Subprotocol() != "binary" {
		t.Fatalf("subprotocol %q", ws.Subprotocol())
	}
	if _, err := box.Write([]byte("RFB 003.008\n")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := ws.Read(ctx); err != nil || string(got) != "RFB 003.008\n" {
		t.Fatalf("server version: %q, %v", got, err)
	}
	fbur := []byte{3, 1, 0, 0, 0, 0, 0, 16, 0, 16}
	msgs := [][]byte{
		[]byte("RFB 003.008\n"), {1}, {0}, // version, security None, ClientInit exclusive
		{5, 1, 0, 10, 0, 10},       // PointerEvent
		{4, 1, 0, 0, 0, 0, 0, 'a'}, // KeyEvent
		fbur,
	}
	for _, m := range msgs {
		if err := ws.Write(ctx, websocket.MessageBinary, m); err != nil {
			t.Fatal(err)
		}
	}
	want := append([]byte("RFB 003.008\n\x01\x01"), fbur...)
	got := make([]byte, len(want))
	_ = box.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(box, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("box got %q, %v; want %q", got, err, want)
	}
	_ = ws.Close(websocket.StatusNormalClosure, "")
	if n, err := box.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("box after the client left: %d, %v; want EOF", n, err)
	}
	if code := <-done; code != websocket.StatusNormalClosure {
		t.Fatalf("close status %v", code)
	}
}

// TestRelayDesktopRefuses closes a stream the filter refuses with 1008 and its reason.
func TestRelayDesktopRefuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	edge, box := fakeDesktop(t)
	u, done := relayServer(t, edge, rfb.Control)
	ws, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageBinary, []byte("GET / HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	_, _, err = ws.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "protocol version") {
		t.Fatalf("read after garbage: %v, want close 1008 naming the version", err)
	}
	if code := <-done; code != websocket.StatusPolicyViolation {
		t.Fatalf("close status %v", code)
	}
	_ = box.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(box); len(b) != 0 || err != nil {
		t.Fatalf("box got %q, %v; want nothing, then EOF", b, err)
	}
}

func TestCloseReason(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	r := closeReason(long)
	if len(r) > maxCloseReason || !strings.HasPrefix(long, r) || len(r) < maxCloseReason-1 {
		t.Fatalf("closeReason cut to %d bytes: %q", len(r), r)
	}
	if closeReason("short") != "short" {
		t.Fatal("short reason changed")
	}
}

// TestViewerRepeaterPerBox: one repeater of viewer reports runs per box with connections, however
// many connections come and go; it stops with the box's last connection, and the next one starts
// another.
func TestViewerRepeaterPerBox(t *testing.T) {
	var e desktopEdge
	if !e.add(testBox, 1, false) {
		t.Fatal("the first connection did not start a repeater")
	}
	if e.add(testBox, 1, false) || e.add("bx_ffffffffffffffff", 1, false) == false {
		t.Fatal("a second connection started another repeater, or another box got none")
	}
	e.add(testBox, -1, false)
	e.add(testBox, -1, false)
	if e.add(testBox, 1, false) {
		t.Fatal("a connection opened before the repeater noticed the box empty started a second one")
	}
	if !e.keepRepeating(testBox) {
		t.Fatal("the repeater stopped while the box has a connection")
	}
	e.add(testBox, -1, false)
	if e.keepRepeating(testBox) {
		t.Fatal("the repeater goes on with no connection")
	}
	if !e.add(testBox, 1, false) {
		t.Fatal("the next connection after the repeater stopped started none")
	}
}

// TestViewerCountsControl: a box's control connections are counted among its open ones, so the
// workflow learns when the lease's holder has none left.
func TestViewerCountsControl(t *testing.T) {
	var e desktopEdge
	e.add(testBox, 1, false)
	e.add(testBox, 1, true)
	if open, control := e.count(testBox); open != 2 || control != 1 {
		t.Fatalf("a viewer and a controller: %d open, %d control", open, control)
	}
	e.add(testBox, -1, true)
	if open, control := e.count(testBox); open != 1 || control != 0 {
		t.Fatalf("after the controller left: %d open, %d control", open, control)
	}
	e.add(testBox, -1, false)
	if open, control := e.count(testBox); open != 0 || control != 0 {
		t.Fatalf("after everyone left: %d open, %d control", open, control)
	}
}

// serverCutText is a ServerCutText message carrying text.
func serverCutText(text string) []byte {
	return append([]byte{3, 0, 0, 0, 0, 0, byte(len(text) >> 8), byte(len(text))}, text...)
}

// TestRelayDesktopClipboard: the box's clipboard (what the controller copied, or anything
// copied inside the box) reaches a control client but never a view client, which still gets
// the frames around it.
func TestRelayDesktopClipboard(t *testing.T) {
	serverInit := append([]byte{0, 16, 0, 16, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0, 0, 0, 0, 4}, "desk"...)
	raw := []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0xa, 0xb, 0xc, 0xd} // one 1x1 Raw rectangle
	for _, mode := range []rfb.Mode{rfb.View, rfb.Control} {
		t.Run(map[rfb.Mode]string{rfb.View: "view", rfb.Control: "control"}[mode], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			edge, box := fakeDesktop(t)
			u, _ := relayServer(t, edge, mode)
			ws, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{Subprotocols: []string{"binary"}})
			if err != nil {
				t.Fatal(err)
			}
			defer ws.CloseNow()
			nc := websocket.NetConn(ctx, ws, websocket.MessageBinary)
			// The client's handshake and a first request, then the server's side.
			for _, m := range [][]byte{[]byte("RFB 003.008\n"), {1}, {1}, {3, 0, 0, 0, 0, 0, 0, 16, 0, 16}} {
				if _, err := nc.Write(m); err != nil {
					t.Fatal(err)
				}
			}
			in := make([]byte, 12+1+1+10)
			_ = box.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(box, in); err != nil {
				t.Fatalf("box got %q: %v", in, err)
			}
			before := append(append([]byte("RFB 003.008\n\x01\x01\x00\x00\x00\x00"), serverInit...), raw...)
			stream := append(append(append(bytes.Clone(before), serverCutText("the controller's password")...),
				[]byte{3, 0, 0, 0, 0xff, 0xff, 0xff, 0xfb, 0, 0, 0, 0, 1}...), // extended clipboard: 5 bytes
				append([]byte{2}, raw...)...) // Bell, then another frame
			if _, err := box.Write(stream); err != nil {
				t.Fatal(err)
			}
			want := append(append(bytes.Clone(before), 2), raw...)
			if mode == rfb.Control {
				want = stream
			}
			got := make([]byte, len(want))
			if _, err := io.ReadFull(nc, got); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("client got %q, %v\nwant %q", got, err, want)
			}
			_ = box.Close()
			if rest, _ := io.ReadAll(nc); len(rest) != 0 {
				t.Fatalf("client got more after the frames: %q", rest)
			}
		})
	}
}

// TestDesktopConnectionLimit: a box's open desktop connections are capped; the connection over
// the cap is refused before any work with resource_exhausted (HTTP 429) naming the limit, and
// a slot freed lets the next one in.
func TestDesktopConnectionLimit(t *testing.T) {
	s := New(Options{Keys: testKeys(t), MaxDesktopConns: 2})
	var releases []func()
	for i := range 2 {
		release, err := s.desktop.reserve(testBox, s.maxDesktopConns)
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		releases = append(releases, release)
	}
	if _, err := s.desktop.reserve("bx_ffffffffffffffff", s.maxDesktopConns); err != nil {
		t.Fatalf("another box's first connection: %v", err)
	}
	_, err := s.desktop.reserve(testBox, s.maxDesktopConns)
	if cocoonbox.ErrorCode(err) != cocoonbox.EResourceExhausted || !strings.Contains(err.Error(), "max_desktop_connections") || !strings.Contains(err.Error(), "2") {
		t.Fatalf("third connection: %v, want resource_exhausted naming max_desktop_connections", err)
	}
	if httpStatus[cocoonbox.EResourceExhausted] != http.StatusTooManyRequests || grpcCodes[cocoonbox.EResourceExhausted] != codes.ResourceExhausted {
		t.Fatal("resource_exhausted does not map to 429 / RESOURCE_EXHAUSTED")
	}
	releases[0]()
	releases[0]() // a second release of one slot frees nothing more
	if _, err := s.desktop.reserve(testBox, s.maxDesktopConns); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := s.desktop.reserve(testBox, s.maxDesktopConns); err == nil {
		t.Fatal("a double release freed two slots")
	}
	if New(Options{}).maxDesktopConns != DefaultMaxDesktopConns || DefaultMaxDesktopConns <= 0 {
		t.Fatal("no default limit")
	}
}
