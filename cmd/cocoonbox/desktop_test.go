package main

import (
	"bytes"
	"context"
	"crypto/des"
	"encoding/binary"
	"io"
	"math/bits"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

// TestDesktopListenOffLoopback: a tunnel anyone on the network can reach hands them the desktop
// as the caller, so listening off loopback needs --control said out loud, and is refused before
// any call to the API otherwise.
func TestDesktopListenOffLoopback(t *testing.T) {
	f := withFake(t)
	for _, addr := range []string{"0.0.0.0:5900", ":5900", "[::]:5900", "192.0.2.1:5900", "desk.example:5900"} {
		t.Run(addr, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, "", "desktop", "web", "--listen", addr)
			want := "--listen " + addr + " is off loopback"
			if code != exitUsage || !strings.Contains(stderr, want) || !strings.Contains(stderr, "--control=false") || stdout != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q; want exit %d naming %q and --control=false", code, stderr, stdout, exitUsage, want)
			}
		})
	}
	if f.last("GetBox") != nil || f.last("TakeOver") != nil {
		t.Fatal("a refused --listen reached the API")
	}
}

// TestDesktopListenRule: loopback needs nothing; off loopback an explicit --control, either way,
// is allowed with a warning that says who can reach it.
func TestDesktopListenRule(t *testing.T) {
	for _, c := range []struct {
		addr       string
		controlSet bool
		ok, warns  bool
	}{
		{"127.0.0.1:5900", false, true, false},
		{"127.0.0.9:0", false, true, false},
		{"[::1]:5900", false, true, false},
		{"localhost:5900", false, true, false},
		{"0.0.0.0:5900", false, false, false},
		{":5900", false, false, false},
		{"0.0.0.0:5900", true, true, true},
		{"10.1.2.3:5900", true, true, true},
		{"nope", false, false, false},
	} {
		warning, err := checkListen(c.addr, c.controlSet)
		if (err == nil) != c.ok || (warning != "") != c.warns {
			t.Errorf("checkListen(%q, %v) = %q, %v; want ok %v, warning %v", c.addr, c.controlSet, warning, err, c.ok, c.warns)
		}
	}
}

// lockedBuffer is a bytes.Buffer a running command writes from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startCLI runs the command line in-process until the returned stop is called, which returns
// stderr and the exit code.
func startCLI(t *testing.T, args ...string) (stderr *lockedBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	app := newApp()
	var out bytes.Buffer
	stderr = &lockedBuffer{}
	app.Reader, app.Writer, app.ErrWriter = strings.NewReader(""), &out, stderr
	done := make(chan int, 1)
	go func() { done <- report(app.RunContext(ctx, append([]string{"cocoonbox"}, args...)), stderr) }()
	stopped := false
	stop = func() int {
		if !stopped {
			stopped = true
			cancel()
		}
		select {
		case code := <-done:
			done <- code
			return code
		case <-time.After(testutil.WaitShort):
			t.Fatal("the command did not stop")
			return -1
		}
	}
	t.Cleanup(func() { stop() })
	return stderr, stop
}

// fakeOpener puts an xdg-open on PATH (and nothing else) that writes its argument to the
// returned file.
func fakeOpener(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	got := filepath.Join(dir, "opened")
	script := "#!/bin/sh\nprintf '%s' \"$1\" > " + got + "\n"
	if err := os.WriteFile(filepath.Join(dir, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	return got
}

// vncLogin runs a 3.8 viewer's handshake with VNC Authentication on addr and returns the
// SecurityResult and its reason.
func vncLogin(t *testing.T, addr, password string) (uint32, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, testutil.WaitShort)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(testutil.WaitShort))
	read := func(n int) []byte {
		b := make([]byte, n)
		if _, err := io.ReadFull(conn, b); err != nil {
			t.Fatalf("read %d bytes: %v", n, err)
		}
		return b
	}
	if v := read(12); string(v) != "RFB 003.008\n" {
		t.Fatalf("version %q", v)
	}
	_, _ = conn.Write([]byte("RFB 003.008\n"))
	if types := read(2); !bytes.Equal(types, []byte{1, 2}) {
		t.Fatalf("security types %v, want VNC Authentication only", types)
	}
	_, _ = conn.Write([]byte{2})
	challenge := read(16)
	key := make([]byte, 8)
	copy(key, password)
	for i := range key {
		key[i] = bits.Reverse8(key[i])
	}
	c, err := des.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	resp := make([]byte, 16)
	c.Encrypt(resp[:8], challenge[:8])
	c.Encrypt(resp[8:], challenge[8:])
	_, _ = conn.Write(resp)
	result := binary.BigEndian.Uint32(read(4))
	if result == 0 {
		return 0, ""
	}
	return result, string(read(int(binary.BigEndian.Uint32(read(4)))))
}

// TestDesktopOpen: --open without --listen tunnels on a free loopback port, prints a one-time
// password and hands vnc:// for that port to the system's opener; a viewer with a wrong
// password is refused before the edge is dialled, one with the right one reaches the edge
// (which the fake API has not: its refusal is the viewer's reason).
func TestDesktopOpen(t *testing.T) {
	withFake(t)
	opened := fakeOpener(t)
	stderr, stop := startCLI(t, "desktop", "web", "--open")
	var url string
	testutil.Eventually(t, testutil.WaitShort, "the opener to run", func() bool {
		b, err := os.ReadFile(opened)
		url = string(b)
		return err == nil && url != ""
	})
	addr, ok := strings.CutPrefix(url, "vnc://127.0.0.1:")
	if !ok || addr == "0" {
		t.Fatalf("opened %q, want vnc://127.0.0.1:PORT", url)
	}
	addr = "127.0.0.1:" + addr
	m := regexp.MustCompile(`VNC password: ([A-Z2-7]{8}) \(valid while this command runs\)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no password in %q", stderr.String())
	}
	if result, reason := vncLogin(t, addr, "AAAAAAAA"); result != 1 || reason != "wrong password" {
		t.Errorf("wrong password: result %d %q", result, reason)
	}
	if result, reason := vncLogin(t, addr, m[1]); result != 1 || !strings.Contains(reason, "/desktop?mode=view") {
		t.Errorf("right password against an API without a desktop edge: result %d %q, want its refusal", result, reason)
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "wrong VNC password (1 of 5)") {
		t.Errorf("stderr does not count the wrong password: %q", stderr)
	}
}

// TestDesktopOpenNeedsOpener: without the platform's opener --open fails before any call to
// the API, saying what is missing.
func TestDesktopOpenNeedsOpener(t *testing.T) {
	f := withFake(t)
	t.Setenv("PATH", t.TempDir())
	_, stderr, code := runCLI(t, "", "desktop", "web", "--open")
	if code == 0 || !strings.Contains(stderr, "xdg-open is not on PATH") {
		t.Fatalf("exit %d, %q", code, stderr)
	}
	if f.last("GetBox") != nil {
		t.Fatal("--open without an opener reached the API")
	}
}

func TestVNCURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:5900": "vnc://127.0.0.1:5900",
		"0.0.0.0:5901":   "vnc://127.0.0.1:5901",
		"[::]:5902":      "vnc://[::1]:5902",
		"[::1]:5903":     "vnc://[::1]:5903",
		"10.1.2.3:5904":  "vnc://10.1.2.3:5904",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := vncURL(a); got != want {
			t.Errorf("vncURL(%s) = %q, want %q", addr, got, want)
		}
	}
}
