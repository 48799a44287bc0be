package s3server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/objstore"
)

// Tests here must not run in parallel: versitygw allows one server per
// process.

const (
	testAccess = "COCOONBOXTESTACCESS1"
	testSecret = "cocoonbox-test-secret-key-0123456789abcd"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testOptions(dir string) Options {
	return Options{Dir: dir, AccessKey: testAccess, SecretKey: testSecret}
}

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	srv, err := Start(testCtx(t), opts)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv
}

func TestStartServesS3AndStops(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "not", "yet", "there")
	srv := start(t, testOptions(dir))

	if !regexp.MustCompile(`^http://127\.0\.0\.1:[1-9][0-9]*$`).MatchString(srv.Endpoint()) {
		t.Errorf("endpoint %q, want http://127.0.0.1:port", srv.Endpoint())
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != dirPerm {
		t.Errorf("dir: got %v %v, want a %v directory", fi, err, dirPerm)
	}

	// Unsigned requests must reach S3 and be refused by it.
	resp, err := http.Get(srv.Endpoint() + "/")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !bytes.Contains(body, []byte("AccessDenied")) {
		t.Errorf("anonymous GET: got %d %s, want 403 AccessDenied", resp.StatusCode, body)
	}

	if err := srv.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	select {
	case <-srv.Done():
	default:
		t.Error("Done not closed after stop")
	}
	if got, _ := os.Getwd(); got != wd {
		t.Errorf("working directory after stop: got %s, want %s", got, wd)
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(srv.Endpoint(), "http://"), time.Second); err == nil {
		c.Close()
		t.Errorf("dial after stop: connected, want refused")
	}
}

func TestStartOccupiedPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()

	opts := testOptions(t.TempDir())
	opts.Addr = addr
	_, err = Start(testCtx(t), opts)
	want := fmt.Sprintf("s3: listen %s: address already in use", addr)
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("errors.Is(err, EADDRINUSE) = false for %v", err)
	}

	// The failure must not leave the process unable to start a server.
	start(t, testOptions(t.TempDir()))
}

func TestStartRejectsBadOptions(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name   string
		mutate func(*Options)
		want   string
	}{
		{"no access key", func(o *Options) { o.AccessKey = "" }, "access key is required"},
		{"no secret key", func(o *Options) { o.SecretKey = "" }, "secret key is required"},
		{"no dir", func(o *Options) { o.Dir = "" }, "dir is required"},
		{"all interfaces", func(o *Options) { o.Addr = "0.0.0.0:0" }, "loopback"},
		{"bare port", func(o *Options) { o.Addr = ":8421" }, "loopback"},
		{"public host", func(o *Options) { o.Addr = "example.com:8421" }, "loopback"},
		{"bad port", func(o *Options) { o.Addr = "127.0.0.1:http" }, "port must be a number"},
		{"no port", func(o *Options) { o.Addr = "127.0.0.1" }, "parse addr"},
		{"meta dir inside dir", func(o *Options) { o.MetaDir = filepath.Join(dir, "meta") }, "must be outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := testOptions(dir)
			tt.mutate(&opts)
			srv, err := Start(testCtx(t), opts)
			if err == nil {
				_ = srv.Stop()
				t.Fatalf("got nil error, want %q", tt.want)
			}
			if !strings.HasPrefix(err.Error(), "s3: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want s3: ...%s...", err, tt.want)
			}
		})
	}
}

func TestStartLocalhost(t *testing.T) {
	opts := testOptions(t.TempDir())
	opts.Addr = "localhost:0"
	srv := start(t, opts)
	if !strings.HasPrefix(srv.Endpoint(), "http://127.0.0.1:") {
		t.Errorf("endpoint %q, want 127.0.0.1", srv.Endpoint())
	}
}

// TestSeveralServersKeepTheWorkingDirectory: versitygw allows one gateway per
// process and changes the working directory, so each server is a child
// process and the caller sees neither limit.
func TestSeveralServersKeepTheWorkingDirectory(t *testing.T) {
	wd, _ := os.Getwd()
	a := start(t, testOptions(t.TempDir()))
	b := start(t, testOptions(t.TempDir()))
	if a.Endpoint() == b.Endpoint() {
		t.Fatalf("two servers on one endpoint %s", a.Endpoint())
	}
	if got, _ := os.Getwd(); got != wd {
		t.Errorf("working directory moved to %s, want %s", got, wd)
	}
}

// TestChildEndsWithParent: a server whose parent dies stops on its own, so a
// killed cocoonbox dev leaves no S3 server behind.
func TestChildStopsWhenStdinCloses(t *testing.T) {
	srv := start(t, testOptions(t.TempDir()))
	srv.child.Load().CloseStdin() // what the kernel does for us when the parent dies
	select {
	case <-srv.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("child still running 10s after its stdin closed")
	}
}

// TestRestartAfterCrash: a server process SIGKILLed under its clients is started again on the
// same endpoint by Restart, and what was stored before is still there for the same client.
func TestRestartAfterCrash(t *testing.T) {
	ctx := testCtx(t)
	srv := start(t, testOptions(t.TempDir()))
	st := newStore(t, srv.Endpoint())
	if err := st.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	data := []byte("kept across a crash")
	if err := st.Put(ctx, "k", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err == nil {
		t.Fatal("Restart of a running server succeeded")
	}
	endpoint := srv.Endpoint()
	if err := syscall.Kill(srv.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done did not close after the server was killed")
	}
	if err := srv.ExitError(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("ExitError = %v, want the kill", err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.Endpoint() != endpoint {
		t.Errorf("endpoint moved across a restart: %s, then %s", endpoint, srv.Endpoint())
	}
	rc, err := st.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got, err := io.ReadAll(rc); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after restart: %q, %v", got, err)
	}
}

func TestStartCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Start(ctx, testOptions(t.TempDir())); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	start(t, testOptions(t.TempDir()))
}

// TestSidecarMetadata runs the fallback for filesystems without user xattrs
// and checks metadata survives a restart.
func TestSidecarMetadata(t *testing.T) {
	xattrSupported = func(string) (bool, error) { return false, nil }
	t.Cleanup(func() { xattrSupported = probeXattr })

	root := t.TempDir()
	dir := filepath.Join(root, "s3")
	data := []byte("snapshot bytes")

	// In-process, because the xattr probe override lives in this process.
	srv, err := startGateway(testCtx(t), testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.stop() })
	st := newStore(t, srv.endpoint)
	ctx := testCtx(t)
	if err := st.EnsureBucket(ctx); err != nil {
		t.Fatalf("ensure bucket: %v", err)
	}
	if err := st.Put(ctx, "a/b", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("put: %v", err)
	}
	before, err := st.Stat(ctx, "a/b")
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	if err := srv.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if entries, err := os.ReadDir(dir + ".meta"); err != nil || len(entries) == 0 {
		t.Fatalf("sidecar dir %s.meta: %v entries, err %v; want metadata there", dir, len(entries), err)
	}

	// With xattrs available again, the existing sidecar dir must still win.
	xattrSupported = probeXattr
	srv2 := start(t, testOptions(dir))
	st = newStore(t, srv2.Endpoint())
	after, err := st.Stat(ctx, "a/b")
	if err != nil {
		t.Fatalf("stat after restart: %v", err)
	}
	if after.ETag != before.ETag || after.ETag == "" {
		t.Errorf("etag after restart: got %q, want %q", after.ETag, before.ETag)
	}
}

func TestProbeXattr(t *testing.T) {
	ok, err := probeXattr(t.TempDir())
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	t.Logf("user xattrs supported on the temp dir: %v", ok)
	if entries, _ := os.ReadDir(t.TempDir()); len(entries) != 0 {
		t.Errorf("probe left %d files behind", len(entries))
	}
}

func newStore(t *testing.T, endpoint string) *objstore.S3 {
	t.Helper()
	st, err := objstore.NewS3(testCtx(t), objstore.Config{
		Endpoint: endpoint, Region: Region, Bucket: "snapshots",
		AccessKey: testAccess, SecretKey: testSecret, PathStyle: true,
	}, &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 10 * time.Second}})
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return st
}
