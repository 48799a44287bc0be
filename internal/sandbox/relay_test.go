package sandbox_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// listen starts a loopback TCP server whose connections go to serve in turn. The fake's boxes
// share the host's network, so this is what a box's 127.0.0.1:{port} reaches.
func listen(t *testing.T, serve ...func(net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for _, s := range serve {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); s(c) }()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRelayHalfClose: through the relay, each side's EOF reaches the other while the other
// direction stays open — client first, then server first.
func TestRelayHalfClose(t *testing.T) {
	f := newFake(t)
	c := f.Client(rootToken)
	sb, err := c.Claim(t.Context(), claimReq("relay"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	port := listen(t,
		func(conn net.Conn) { // reads to EOF, then answers
			in, _ := io.ReadAll(conn)
			conn.Write(append([]byte("echo:"), in...))
			conn.(*net.TCPConn).CloseWrite()
		},
		func(conn net.Conn) { // answers and half-closes first, then reads to EOF
			conn.Write([]byte("hello"))
			conn.(*net.TCPConn).CloseWrite()
			in, _ := io.ReadAll(conn)
			got <- string(in)
		})

	conn, err := c.DialPort(t.Context(), sb.SandboxRef, port)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if err := conn.CloseWrite(); err != nil {
		t.Fatalf("close write: %v", err)
	}
	if answer, err := io.ReadAll(conn); err != nil || string(answer) != "echo:ping" {
		t.Fatalf("after the client's EOF: %q, %v", answer, err)
	}

	conn2, err := c.DialPort(t.Context(), sb.SandboxRef, port)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn2.Close()
	conn2.SetDeadline(time.Now().Add(10 * time.Second))
	if hello, err := io.ReadAll(conn2); err != nil || string(hello) != "hello" {
		t.Fatalf("up to the server's EOF: %q, %v", hello, err)
	}
	if _, err := conn2.Write([]byte("bye")); err != nil {
		t.Fatalf("write after the server's EOF: %v", err)
	}
	conn2.CloseWrite()
	if s := <-got; s != "bye" {
		t.Fatalf("server read %q after its own EOF, want %q", s, "bye")
	}
}

// TestRelayBytesBehind101: bytes the engine sends in the same packet as the 101 answer are the
// stream's first bytes, not lost in the response reader's buffer.
func TestRelayBytesBehind101(t *testing.T) {
	reqs := make(chan *http.Request, 1)
	port := listen(t, func(conn net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(conn))
		if err != nil {
			return
		}
		reqs <- req
		conn.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: tcp\r\nConnection: Upgrade\r\n\r\nearly;"))
		time.Sleep(50 * time.Millisecond)
		conn.Write([]byte("late"))
	})
	c := sandbox.NewHTTP("127.0.0.1:"+strconv.Itoa(port), "node-token", nil)
	conn, err := c.DialPort(t.Context(), sandbox.SandboxRef{ID: "sb_1", Token: "sb-token"}, 8080)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if got, err := io.ReadAll(conn); err != nil || string(got) != "early;late" {
		t.Fatalf("stream: %q, %v", got, err)
	}
	req := <-reqs
	if req.URL.Path != "/v1/sandboxes/sb_1/ports/8080" || req.Header.Get("Upgrade") != "tcp" ||
		req.Header.Get("Connection") != "Upgrade" || req.Header.Get("Authorization") != "Bearer sb-token" {
		t.Fatalf("upgrade request: %s %v", req.URL, req.Header)
	}
}

// TestRelayRefused: the engine's refusals come back as sentinels.
func TestRelayRefused(t *testing.T) {
	f := newFake(t)
	c := f.Client(rootToken)
	sb, err := c.Claim(t.Context(), claimReq("relay-refused"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DialPort(t.Context(), sb.SandboxRef, deadPort(t)); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("dial a port nobody listens on: %v, want %v", err, sandbox.ErrUnavailable)
	}
	wrong := sandbox.SandboxRef{ID: sb.ID, Token: "0123456789abcdef0123456789abcdef"}
	if _, err := c.DialPort(t.Context(), wrong, 80); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("dial with a wrong token: %v, want %v", err, sandbox.ErrNotFound)
	}
	port := listen(t, func(conn net.Conn) {
		http.ReadRequest(bufio.NewReader(conn))
		conn.Write([]byte("HTTP/1.1 426 Upgrade Required\r\nContent-Type: application/json\r\nContent-Length: 26\r\n\r\n{\"error\":\"upgrade to tcp\"}"))
	})
	_, err = sandbox.NewHTTP("127.0.0.1:"+strconv.Itoa(port), "", nil).DialPort(t.Context(), sb.SandboxRef, 80)
	if !errors.Is(err, sandbox.ErrUpgradeRequired) || sandbox.StatusCode(err) != 426 {
		t.Errorf("426 answer: %v", err)
	}
}

// TestRelayHandshakeBounded: an engine that accepts and never answers cannot hold DialPort past
// its context.
func TestRelayHandshakeBounded(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	port := listen(t, func(net.Conn) { <-hold })
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := sandbox.NewHTTP("127.0.0.1:"+strconv.Itoa(port), "", nil).DialPort(ctx, sandbox.SandboxRef{ID: "sb_1"}, 80)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("dial a silent engine: %v after %s", err, time.Since(start))
	}
}

func deadPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
