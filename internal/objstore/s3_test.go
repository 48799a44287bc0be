package objstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/s3server"
)

const (
	testAccess = "COCOONBOXTESTACCESS1"
	testSecret = "cocoonbox-test-secret-key-0123456789abcd"
	testBucket = "snapshots"
)

// testCtx bounds each test: a hung S3 call should fail the test, not the
// package timeout.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startServer runs the embedded S3 server on dir until the test ends. Tests
// in this package must not run in parallel: versitygw allows one per process.
func startServer(t *testing.T, dir string) *s3server.Server {
	t.Helper()
	srv, err := s3server.Start(testCtx(t), s3server.Options{Dir: dir, AccessKey: testAccess, SecretKey: testSecret})
	if err != nil {
		t.Fatalf("start s3 server: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop s3 server: %v", err)
		}
	})
	return srv
}

func newStore(t *testing.T, endpoint string) *objstore.S3 {
	t.Helper()
	st, err := objstore.NewS3(testCtx(t), objstore.Config{
		Endpoint:  endpoint,
		Region:    s3server.Region,
		Bucket:    testBucket,
		AccessKey: testAccess,
		SecretKey: testSecret,
		PathStyle: true,
	}, &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 10 * time.Second}})
	if err != nil {
		t.Fatalf("new s3 store: %v", err)
	}
	return st
}

// newBucketStore starts a server on a fresh dir and returns a store whose
// bucket exists.
func newBucketStore(t *testing.T) (*objstore.S3, *s3server.Server) {
	t.Helper()
	srv := startServer(t, t.TempDir())
	st := newStore(t, srv.Endpoint())
	if err := st.EnsureBucket(testCtx(t)); err != nil {
		t.Fatalf("ensure bucket: %v", err)
	}
	return st, srv
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func readAll(t *testing.T, st objstore.Store, key string) []byte {
	t.Helper()
	rc, err := st.Get(testCtx(t), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b
}

func TestS3RoundTrip(t *testing.T) {
	st, _ := newBucketStore(t)
	ctx := testCtx(t)

	bodies := map[string]struct {
		data []byte
		r    func([]byte) io.Reader
	}{
		// A seekable body is hashed and signed; a streamed one (a snapshot
		// pipe) cannot be, and takes the unsigned path on plain http.
		"boxes/b1/seekable.tar.zst": {randomBytes(t, 256<<10), func(b []byte) io.Reader { return bytes.NewReader(b) }},
		"boxes/b1/streamed.tar.zst": {randomBytes(t, 3<<20+17), func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) }},
		"boxes/b1/empty":            {nil, func(b []byte) io.Reader { return bytes.NewReader(b) }},
	}
	for key, body := range bodies {
		before := time.Now().Add(-2 * time.Second)
		if err := st.Put(ctx, key, body.r(body.data), int64(len(body.data))); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		if got := readAll(t, st, key); !bytes.Equal(got, body.data) {
			t.Fatalf("get %s: got %d bytes, want %d identical bytes", key, len(got), len(body.data))
		}
		info, err := st.Stat(ctx, key)
		if err != nil {
			t.Fatalf("stat %s: %v", key, err)
		}
		if info.Key != key || info.Size != int64(len(body.data)) || info.ETag == "" || strings.Contains(info.ETag, `"`) {
			t.Errorf("stat %s: got %+v, want size %d and an unquoted etag", key, info, len(body.data))
		}
		if info.LastModified.Before(before) {
			t.Errorf("stat %s: last modified %v, want after %v", key, info.LastModified, before)
		}
		if err := st.Delete(ctx, key); err != nil {
			t.Fatalf("delete %s: %v", key, err)
		}
		if _, err := st.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("stat after delete %s: got %v, want ErrNotFound", key, err)
		}
		if err := st.Delete(ctx, key); err != nil {
			t.Fatalf("delete missing %s: got %v, want nil", key, err)
		}
	}
}

func TestS3PutReplaces(t *testing.T) {
	st, _ := newBucketStore(t)
	ctx := testCtx(t)
	for _, s := range []string{"first version", "second"} {
		if err := st.Put(ctx, "k", strings.NewReader(s), int64(len(s))); err != nil {
			t.Fatalf("put: %v", err)
		}
	}
	if got := string(readAll(t, st, "k")); got != "second" {
		t.Fatalf("got %q, want %q", got, "second")
	}
}

func TestS3MissingKeyIsNotFound(t *testing.T) {
	st, _ := newBucketStore(t)
	ctx := testCtx(t)

	if _, err := st.Get(ctx, "no/such/key"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("get: got %v, want ErrNotFound", err)
	}
	if _, err := st.Stat(ctx, "no/such/key"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("stat: got %v, want ErrNotFound", err)
	}
	if err := st.Delete(ctx, "no/such/key"); err != nil {
		t.Errorf("delete: got %v, want nil", err)
	}
}

func TestS3MissingBucket(t *testing.T) {
	srv := startServer(t, t.TempDir())
	st := newStore(t, srv.Endpoint())
	ctx := testCtx(t)

	err := st.Check(ctx)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("check: got %v, want bucket does not exist", err)
	}
	// A missing bucket is a misconfiguration, not a missing snapshot.
	if _, err := st.Get(ctx, "k"); err == nil || errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("get: got %v, want a non-NotFound error", err)
	}
}

func TestS3EnsureBucketIdempotent(t *testing.T) {
	srv := startServer(t, t.TempDir())
	st := newStore(t, srv.Endpoint())
	ctx := testCtx(t)

	for i := range 3 {
		if err := st.EnsureBucket(ctx); err != nil {
			t.Fatalf("ensure bucket #%d: %v", i+1, err)
		}
	}
	if err := st.Check(ctx); err != nil {
		t.Fatalf("check: %v", err)
	}
}

func TestS3SurvivesServerRestart(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(t, 1<<20)
	const key = "boxes/b2/snap-1.tar.zst"

	srv := startServer(t, dir)
	st := newStore(t, srv.Endpoint())
	ctx := testCtx(t)
	if err := st.EnsureBucket(ctx); err != nil {
		t.Fatalf("ensure bucket: %v", err)
	}
	if err := st.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("put: %v", err)
	}
	before, err := st.Stat(ctx, key)
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	srv = startServer(t, dir)
	st = newStore(t, srv.Endpoint())
	if err := st.Check(ctx); err != nil {
		t.Fatalf("check after restart: %v", err)
	}
	if got := readAll(t, st, key); !bytes.Equal(got, data) {
		t.Fatalf("get after restart: got %d bytes, want %d identical bytes", len(got), len(data))
	}
	after, err := st.Stat(ctx, key)
	if err != nil {
		t.Fatalf("stat after restart: %v", err)
	}
	if after.ETag != before.ETag || after.Size != before.Size {
		t.Errorf("stat after restart: got %+v, want %+v", after, before)
	}
}

// TestS3DownIsUnavailable: every call to a store that does not answer fails as EUnavailable with
// one sentence naming the store, quickly, so callers can say so and retry.
func TestS3DownIsUnavailable(t *testing.T) {
	srv := startServer(t, t.TempDir())
	st := newStore(t, srv.Endpoint())
	ctx := testCtx(t)
	if err := st.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(srv.Endpoint(), "http://")
	for name, call := range map[string]func() error{
		"check":  func() error { return st.Check(ctx) },
		"put":    func() error { return st.Put(ctx, "k", strings.NewReader("x"), 1) },
		"get":    func() error { _, err := st.Get(ctx, "k"); return err },
		"delete": func() error { return st.Delete(ctx, "k") },
	} {
		start := time.Now()
		err := call()
		if cocoonbox.ErrorCode(err) != cocoonbox.EUnavailable {
			t.Errorf("%s: %v, want unavailable", name, err)
			continue
		}
		if want := "snapshot store (S3 at " + host + ") is not answering"; cocoonbox.ErrorMessage(err) != want {
			t.Errorf("%s: message %q, want %q", name, cocoonbox.ErrorMessage(err), want)
		}
		t.Logf("%s failed after %s", name, time.Since(start).Round(time.Millisecond))
	}
}

// TestS3CorruptObjectIsErrCorrupt: a byte flipped on the server's disk after an upload makes the
// read fail with ErrCorrupt, from the checksum the upload stored with the object.
func TestS3CorruptObjectIsErrCorrupt(t *testing.T) {
	dir := t.TempDir()
	srv := startServer(t, dir)
	st := newStore(t, srv.Endpoint())
	ctx := testCtx(t)
	if err := st.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	data := randomBytes(t, 100<<10)
	if _, err := st.Upload(ctx, "snap/one", bytes.NewReader(data), objstore.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, testBucket, "snap", "one")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("the object's file on the server: %v", err)
	}
	if _, err := f.WriteAt([]byte{data[5000] ^ 0xff}, 5000); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	rc, err := st.Get(ctx, "snap/one")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadAll(rc); !errors.Is(err, objstore.ErrCorrupt) {
		t.Fatalf("read of a corrupted object: %v, want ErrCorrupt", err)
	}
}
