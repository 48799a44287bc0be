package engine_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/images"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// The benchmarks run real gVisor boxes of the base image (make image), like the conformance
// suite's local engine, never the fake runtime the tests use: the point is what a real box
// costs. They fail rather than skip when runsc or the image is missing, so `make bench` cannot
// quietly write a table without them.

// Named waits for the untimed parts, so a wedged box fails the benchmark with a reason.
const (
	benchWaitShort = 10 * time.Second
	benchWaitLong  = 2 * time.Minute
)

const benchRootToken = "bench-root-token"

// benchRuntime is the real gVisor runtime in a short temporary directory (runsc's unix socket
// paths must fit in 108 bytes). Its cleanup destroys every box found under the directory, raw
// or engine-made, unpins runsc's network namespace, removes the directory and checks that no
// mount under it survived.
type benchRuntime struct {
	rt     runtime.Runtime
	rootfs string
	cache  string // COCOONBOX_IMAGE_CACHE, "" for the default
	dir    string
}

func newBenchRuntime(b *testing.B) *benchRuntime {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Fatal("the engine benchmarks need root (overlay mounts, namespaces, runsc)")
	}
	cache, _ := config.Env()("COCOONBOX_IMAGE_CACHE")
	rootfs, err := images.Resolve(cache, "base")
	if err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "cbbench-")
	if err != nil {
		b.Fatal(err)
	}
	rt, err := runtime.New(runtime.NameGVisor, runtime.Options{DataDir: filepath.Join(dir, "runtime")})
	if err != nil {
		_ = os.RemoveAll(dir)
		b.Fatal(err)
	}
	r := &benchRuntime{rt: rt, rootfs: rootfs, cache: cache, dir: dir}
	b.Cleanup(func() { r.cleanup(b) })
	return r
}

// boxDirs are where boxes live: raw ones under boxes/, the engine's under engine/boxes/.
func (r *benchRuntime) boxDirs() []string {
	return []string{filepath.Join(r.dir, "boxes"), filepath.Join(r.dir, "engine", "boxes")}
}

func (r *benchRuntime) cleanup(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), benchWaitLong)
	defer cancel()
	for _, d := range r.boxDirs() {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if err := r.rt.Destroy(ctx, e.Name()); err != nil {
				b.Errorf("cleanup: %v", err)
			}
		}
	}
	if c, ok := r.rt.(io.Closer); ok {
		if err := c.Close(); err != nil {
			b.Errorf("cleanup: %v", err)
		}
	}
	if left := mountsUnder(r.dir); len(left) > 0 {
		b.Errorf("cleanup: still mounted: %v", left)
		return // removing the directory would reach into the mounts
	}
	if err := os.RemoveAll(r.dir); err != nil {
		b.Errorf("cleanup: %v", err)
	}
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// start starts a raw box of the engine's default size (small), as a cold claim would.
func (r *benchRuntime) start(b *testing.B) string {
	b.Helper()
	id := newBenchID()
	sz := cocoonbox.Size(sandbox.SizeSmall).Spec()
	spec := runtime.Spec{ID: id, Dir: filepath.Join(r.dir, "boxes", id), Rootfs: r.rootfs, VCPUs: sz.VCPUs, MemoryMB: sz.MemoryMB, DiskMB: sz.DiskMB}
	ctx, cancel := context.WithTimeout(context.Background(), benchWaitLong)
	defer cancel()
	if err := r.rt.Start(ctx, spec); err != nil {
		b.Fatal(err)
	}
	return id
}

func (r *benchRuntime) destroy(b *testing.B, id string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchWaitLong)
	defer cancel()
	if err := r.rt.Destroy(ctx, id); err != nil {
		b.Fatal(err)
	}
}

// exec runs argv in a raw box and returns its stdout; a failure or non-zero exit fails b.
func (r *benchRuntime) exec(b *testing.B, id string, argv ...string) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchWaitShort)
	defer cancel()
	var out, errOut strings.Builder
	code, err := r.rt.Exec(ctx, id, runtime.ExecRequest{Argv: argv, Stdout: &out, Stderr: &errOut})
	if err != nil || code != 0 {
		b.Fatalf("exec %q: code %d, err %v, stderr %q", argv, code, err, errOut.String())
	}
	return out.String()
}

func (r *benchRuntime) hibernate(b *testing.B, id string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchWaitLong)
	defer cancel()
	if err := r.rt.Hibernate(ctx, id); err != nil {
		b.Fatal(err)
	}
}

func (r *benchRuntime) wake(b *testing.B, id string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchWaitLong)
	defer cancel()
	if err := r.rt.Wake(ctx, id); err != nil {
		b.Fatal(err)
	}
}

func newBenchID() string {
	p := make([]byte, 8)
	_, _ = rand.Read(p)
	return "sb_" + hex.EncodeToString(p)
}

// benchEngine is a real engine over benchRuntime, served on loopback with e.Serve as `cocoonbox
// serve engine` does, and a root client. Its cleanup stops the server and the pool filler
// before benchRuntime's cleanup destroys the boxes.
type benchEngine struct {
	*benchRuntime
	cli *sandbox.HTTP
	url string
}

func newBenchEngine(b *testing.B) *benchEngine {
	b.Helper()
	r := newBenchRuntime(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.New(engine.Options{
		Dir: filepath.Join(r.dir, "engine"), Runtime: r.rt, Images: images.Resolver(r.cache),
		RootToken: benchRootToken, OwnerAddr: ln.Addr().String(),
	})
	if err != nil {
		_ = ln.Close()
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.Serve(ctx, ln) }()
	b.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			b.Errorf("serve: %v", err)
		}
		_ = e.Close()
	})
	url := "http://" + ln.Addr().String()
	return &benchEngine{benchRuntime: r, cli: sandbox.NewHTTP(url, benchRootToken, nil), url: url}
}

// claim claims a small base box, warm if the pool has one.
func (e *benchEngine) claim(b *testing.B) sandbox.SandboxRef {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchWaitLong)
	defer cancel()
	c, err := e.cli.Claim(ctx, sandbox.ClaimRequest{Template: "base", Size: sandbox.SizeSmall, ClaimRef: newBenchID()})
	if err != nil {
		b.Fatal(err)
	}
	return c.SandboxRef
}

func (e *benchEngine) release(b *testing.B, sb sandbox.SandboxRef) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchWaitLong)
	defer cancel()
	if err := e.cli.Release(ctx, sb); err != nil {
		b.Fatal(err)
	}
}

// exec runs argv through the API and returns its stdout; a failure or non-zero exit fails b.
func (e *benchEngine) exec(b *testing.B, sb sandbox.SandboxRef, argv ...string) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchWaitLong)
	defer cancel()
	res, err := e.cli.Exec(ctx, sb, sandbox.ExecRequest{Argv: argv})
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("exec %q: %+v, %v", argv, res, err)
	}
	return res.Stdout
}

func (e *benchEngine) hibernate(b *testing.B, sb sandbox.SandboxRef) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchWaitLong)
	defer cancel()
	if err := e.cli.Hibernate(ctx, sb); err != nil {
		b.Fatal(err)
	}
}

// settledMemory polls a box's memory use until two readings 250 ms apart differ by less than
// 1 MiB (the box's boot work is done), and returns the last reading in MiB.
func settledMemory(b *testing.B, read func() (int64, error)) float64 {
	b.Helper()
	const step, slack = 250 * time.Millisecond, 1 << 20
	prev := int64(-1 << 40)
	var cur int64
	testutil.Eventually(b, benchWaitShort, "the box's memory use to settle", func() bool {
		var err error
		if cur, err = read(); err != nil {
			b.Fatal(err)
		}
		if d := cur - prev; d > -slack && d < slack {
			return true
		}
		prev = cur
		time.Sleep(step)
		return false
	})
	return float64(cur) / (1 << 20)
}

// The relay sink listens on sinkPort in the box, reads each connection to its EOF, then answers
// the byte count and closes. It writes sinkReady once it listens.
const (
	sinkPort  = 7100
	sinkReady = "/tmp/sink.ready"
	relayMiB  = 64
)

const sinkPy = `
import socket, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7100))
s.listen(16)
open("/tmp/sink.ready", "w").close()

def sink(c):
    buf, n = bytearray(1 << 20), 0
    while True:
        k = c.recv_into(buf)
        if not k:
            break
        n += k
    c.sendall(b"%d\n" % n)
    c.close()

while True:
    c, _ = s.accept()
    threading.Thread(target=sink, args=(c,), daemon=True).start()
`

// sinkArgv starts the sink in the background, detached from the exec that starts it.
var sinkArgv = []string{"sh", "-c", `setsid python3 -c "$1" </dev/null >/tmp/sink.log 2>&1 &`, "sh", sinkPy}

// halfConn is a relay connection of either kind: runtime.HalfCloser or sandbox.Conn.
type halfConn interface {
	net.Conn
	CloseWrite() error
}

// pump streams relayMiB MiB into the sink over c, half-closes, and waits for the sink's count:
// the time is from the first byte sent to the last byte received in the box.
func pump(c halfConn) (time.Duration, error) {
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(benchWaitLong))
	buf := make([]byte, 1<<20)
	start := time.Now()
	for range relayMiB {
		if _, err := c.Write(buf); err != nil {
			return 0, fmt.Errorf("write: %w", err)
		}
	}
	if err := c.CloseWrite(); err != nil {
		return 0, fmt.Errorf("close write: %w", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	took := time.Since(start)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("read count: %w", err)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(line)); n != relayMiB<<20 {
		return 0, fmt.Errorf("the sink got %q bytes, want %d", strings.TrimSpace(line), relayMiB<<20)
	}
	return took, nil
}
