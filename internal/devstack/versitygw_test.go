package devstack_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/objstore"
)

// versitygwBucket is the bucket runVersitygw creates.
const versitygwBucket = "cocoonbox-ext"

// runVersitygw runs the standalone versitygw binary (.bin/versitygw, installed by make deps at
// the version go.mod embeds) in dir, creates its bucket, and returns the S3 configuration that
// reaches it; the server dies with the test. The posix backend keeps object key k of the bucket
// at dir/data/<bucket>/k, so tests can look at (and corrupt) the files behind the objects.
func runVersitygw(t *testing.T, dir string) config.S3 {
	t.Helper()
	bin := filepath.Join(repoRoot(t), ".bin", "versitygw")
	if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("versitygw binary %s missing or not executable (run make deps): %v", bin, err)
	}
	// Metadata goes to a sidecar dir rather than user xattrs, which some temp filesystems
	// (tmpfs before Linux 6.6) cannot write; it sits beside the root so it is not a bucket.
	data, meta := filepath.Join(dir, "data"), filepath.Join(dir, "meta")
	for _, d := range []string{data, meta} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logPath := filepath.Join(dir, "versitygw.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()

	addr := freeLoopbackAddr(t)
	s3 := config.S3{
		Endpoint: "http://" + addr, Region: "us-east-1", Bucket: versitygwBucket,
		AccessKey: "cbtest-" + rand.Text()[:8], SecretKey: rand.Text(), PathStyle: true,
	}
	cmd := exec.Command(bin, "--access", s3.AccessKey, "--secret", s3.SecretKey,
		"--region", s3.Region, "--port", addr, "--quiet", "posix", "--sidecar", meta, data)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := awaitBucket(ctx, s3, exited); err != nil {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("versitygw on %s: %v\n%s", addr, err, log)
	}
	return s3
}

// awaitBucket polls until the server answers and the bucket exists, and stops early if the
// server exited (a port taken between freeLoopbackAddr and its bind, a bad flag).
func awaitBucket(ctx context.Context, s3 config.S3, exited <-chan error) error {
	store, err := objstore.NewS3(ctx, objstore.Config{
		Endpoint: s3.Endpoint, Region: s3.Region, Bucket: s3.Bucket,
		AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, PathStyle: s3.PathStyle,
	}, nil)
	if err != nil {
		return err
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		try, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = store.EnsureBucket(try)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case werr := <-exited:
			return fmt.Errorf("exited before serving (%v): %w", werr, err)
		case <-ctx.Done():
			return fmt.Errorf("not serving: %w", err)
		case <-tick.C:
		}
	}
}

// freeLoopbackAddr is a loopback address with a port nothing listened on a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// repoRoot is the directory holding go.mod, found by walking up from the working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("repo root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// TestExternalS3ByConfig shows the dev stack uses an S3 server chosen by configuration alone: with
// s3.endpoint pointing at a standalone versitygw it starts no embedded server, and its objects land
// in that server's storage.
func TestExternalS3ByConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	extDir := t.TempDir()
	ext := runVersitygw(t, extDir)
	cfg := testConfig(t, filepath.Join(t.TempDir(), "home"))
	cfg.S3 = ext
	d := startDev(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if got := d.URLs().S3; got != ext.Endpoint {
		t.Fatalf("dev S3 endpoint = %q, want the external %q", got, ext.Endpoint)
	}
	if _, err := os.Stat(cfg.DataDir("s3")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("embedded s3 dir %s: %v, want it absent", cfg.DataDir("s3"), err)
	}
	if h := getHealth(t, d); h.Components["s3"] != "ok" {
		t.Fatalf("healthz s3 = %q (%+v)", h.Components["s3"], h)
	}

	const key, body = "test/external.txt", "stored in versitygw"
	if err := d.Blobs.Put(ctx, key, strings.NewReader(body), int64(len(body))); err != nil {
		t.Fatalf("put: %v", err)
	}
	rc, err := d.Blobs.Get(ctx, key)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	got, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil || string(got) != body {
		t.Fatalf("get = %q, %v; want %q", got, err, body)
	}
	// The posix backend keeps bucket/key as a plain file: the object is in versitygw's storage.
	file := filepath.Join(extDir, "data", ext.Bucket, filepath.FromSlash(key))
	if onDisk, err := os.ReadFile(file); err != nil || string(onDisk) != body {
		t.Fatalf("versitygw file %s = %q, %v; want %q", file, onDisk, err, body)
	}
}
