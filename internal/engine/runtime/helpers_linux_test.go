package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/engine/images"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// testRootfs is the base image make image built. The tests need it and the real runsc: they
// fail, never skip, when either is missing, so CI cannot pass without running them.
func testRootfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the runtime tests need root (overlay mounts, namespaces, runsc)")
	}
	cache, _ := config.Env()("COCOONBOX_IMAGE_CACHE")
	rootfs, err := images.Resolve(cache, "base")
	if err != nil {
		t.Fatal(err)
	}
	return rootfs
}

// shortTempDir is a temporary directory with a short path: runsc puts unix sockets under its
// --root, and a socket path must fit in 108 bytes.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cbrt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// testEnv is one runtime with its data dir and a directory for box dirs.
type testEnv struct {
	rt     Runtime
	data   string
	boxes  string
	rootfs string
}

func newTestEnv(t *testing.T, name string) *testEnv {
	t.Helper()
	return newTestEnvWith(t, name, Options{})
}

// newTestEnvWith is newTestEnv with opts (DataDir and InsecureNoIsolation are set here).
func newTestEnvWith(t *testing.T, name string, opts Options) *testEnv {
	t.Helper()
	rootfs := testRootfs(t)
	base := shortTempDir(t)
	e := &testEnv{data: filepath.Join(base, "data"), boxes: filepath.Join(base, "boxes"), rootfs: rootfs}
	opts.DataDir, opts.InsecureNoIsolation = e.data, name == NameProcess
	rt, err := New(name, opts)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, rt)
	if rt.Name() != name {
		t.Fatalf("New(%q) gave %q", name, rt.Name())
	}
	e.rt = rt
	return e
}

// closeAtEnd closes rt when the test ends, before its temporary data dir is removed (cleanups
// run last-registered first, and the data dir was made before rt).
func closeAtEnd(t *testing.T, rt Runtime) {
	t.Cleanup(func() {
		if c, ok := rt.(io.Closer); ok {
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		}
	})
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "sb_" + hex.EncodeToString(b)
}

// spec returns a fresh box spec; the box's Dir does not exist yet.
func (e *testEnv) spec() Spec {
	id := newID()
	return Spec{ID: id, Dir: filepath.Join(e.boxes, id), Rootfs: e.rootfs, VCPUs: 1, MemoryMB: 512, DiskMB: 1024}
}

// start starts a box and destroys it when the test ends, checking nothing is left mounted.
func (e *testEnv) start(t *testing.T, spec Spec) Spec {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
		defer cancel()
		if err := e.rt.Destroy(ctx, spec.ID); err != nil {
			t.Errorf("destroy %s: %v", spec.ID, err)
		}
		if mounted(filepath.Join(spec.Dir, rootfsDir)) {
			t.Errorf("destroy %s left the overlay mounted", spec.ID)
		}
		if mounted(filepath.Join(spec.Dir, volumeDir)) {
			t.Errorf("destroy %s left the disk mounted", spec.ID)
		}
		testutil.Eventually(t, testutil.WaitShort, "the loop device of "+spec.ID+" to detach", func() bool { return len(loopsUnder(spec.Dir)) == 0 })
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()
	if err := e.rt.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

// sh runs a shell command in the box and returns its stdout; a failure fails the test.
func (e *testEnv) sh(t *testing.T, id, script string) string {
	t.Helper()
	return e.shWithin(t, testutil.WaitShort, id, script)
}

// shWithin is sh for a command that does real work (reading a whole filesystem), given within.
func (e *testEnv) shWithin(t *testing.T, within time.Duration, id, script string) string {
	t.Helper()
	out, errOut, code, err := e.execWithin(within, id, "sh", "-c", script)
	if err != nil || code != 0 {
		t.Fatalf("sh -c %q: code %d, err %v, stderr %q", script, code, err, errOut)
	}
	return out
}

func (e *testEnv) exec(id string, argv ...string) (stdout, stderr string, code int, err error) {
	return e.execWithin(testutil.WaitShort, id, argv...)
}

func (e *testEnv) execWithin(within time.Duration, id string, argv ...string) (stdout, stderr string, code int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var o, eb bytes.Buffer
	code, err = e.rt.Exec(ctx, id, ExecRequest{Argv: argv, Stdout: &o, Stderr: &eb})
	return o.String(), eb.String(), code, err
}

// dial connects to port in the box, waiting for a server that is still starting to listen.
func (e *testEnv) dial(t *testing.T, id string, port int) HalfCloser {
	t.Helper()
	deadline := time.Now().Add(testutil.WaitShort)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitShort)
		c, err := e.rt.Dial(ctx, id, port)
		cancel()
		if err == nil {
			return c
		}
		if !errors.Is(err, ErrPortClosed) || time.Now().After(deadline) {
			t.Fatalf("dial %d: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Servers the relay tests run in the box, in Python (python3-minimal is in the base image):
// socat passes EOF on by closing rather than shutting down, so it cannot test half-close.
const (
	echoPort = 7000 // echoes until the client's EOF, then closes
	byePort  = 7001 // says "bye", shuts down its write side, stores what it reads in /tmp/got
	zeroPort = 7002 // sends 64 MiB of zeros, then closes
)

const serversPy = `
import socket, threading

def serve(port, handle):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(16)
    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()

def read_all(c):
    d = b""
    while True:
        x = c.recv(65536)
        if not x:
            return d
        d += x

def echo(c):
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.close()

def bye(c):
    c.sendall(b"bye\n")
    c.shutdown(socket.SHUT_WR)
    d = read_all(c)
    with open("/tmp/got.tmp", "wb") as f:
        f.write(d)
    import os
    os.rename("/tmp/got.tmp", "/tmp/got")
    c.close()

def zero(c):
    buf = bytes(1 << 20)
    for _ in range(64):
        c.sendall(buf)
    c.close()

for port, handle in ((7000, echo), (7001, bye)):
    threading.Thread(target=serve, args=(port, handle), daemon=True).start()
serve(7002, zero)
`

func (e *testEnv) startServers(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitShort)
	defer cancel()
	code, err := e.rt.Exec(ctx, id, ExecRequest{
		Argv:  []string{"sh", "-c", "cat > /root/servers.py && { setsid python3 /root/servers.py </dev/null >/tmp/servers.log 2>&1 & }"},
		Stdin: strings.NewReader(serversPy),
	})
	if err != nil || code != 0 {
		t.Fatalf("start servers: %d, %v", code, err)
	}
}

// checkHalfClose proves EOF passes each way on its own through a relay.
func (e *testEnv) checkHalfClose(t *testing.T, id string) {
	t.Helper()
	// Client → box EOF: the echo server answers everything, then sees our EOF and closes.
	c := e.dial(t, id, echoPort)
	_ = c.SetDeadline(time.Now().Add(testutil.WaitShort))
	msg := strings.Repeat("hello through the relay\n", 1000)
	go func() {
		_, _ = io.WriteString(c, msg)
		_ = c.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != msg {
		t.Fatalf("echo: got %d bytes (want %d), err %v", len(got), len(msg), err)
	}
	_ = c.Close()

	// Box → client EOF: the server closes its side first; we still write after reading EOF.
	c = e.dial(t, id, byePort)
	_ = c.SetDeadline(time.Now().Add(testutil.WaitShort))
	got, err = io.ReadAll(c)
	if err != nil || string(got) != "bye\n" {
		t.Fatalf("bye: got %q, err %v", got, err)
	}
	if _, err := io.WriteString(c, "written after EOF"); err != nil {
		t.Fatalf("write after the server's EOF: %v", err)
	}
	_ = c.CloseWrite()
	_, _ = io.ReadAll(c) // the server closes once it has our EOF
	_ = c.Close()
	var last string
	testutil.Eventually(t, testutil.WaitShort, "the server to store what was written after its EOF", func() bool {
		out, errOut, code, err := e.exec(id, "cat", "/tmp/got")
		last = fmt.Sprintf("%q %q %d %v", out, errOut, code, err)
		return out == "written after EOF"
	}, &last)
}

// checkPortClosed: dialing a port nobody listens on says so.
func (e *testEnv) checkPortClosed(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitShort)
	defer cancel()
	c, err := e.rt.Dial(ctx, id, 7999)
	if !errors.Is(err, ErrPortClosed) {
		if c != nil {
			_ = c.Close()
		}
		t.Fatalf("dial a closed port: %v, want ErrPortClosed", err)
	}
}

// loopsUnder lists the loop devices whose backing file is under dir.
func loopsUnder(dir string) []string {
	var out []string
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), dir+"/") {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(p))))
		}
	}
	return out
}
