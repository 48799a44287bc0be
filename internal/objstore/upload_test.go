package objstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/s3server"
)

// streamSource writes n pseudo-random bytes into w in uneven chunks, as a
// tar | zstd pipe would, and returns their sha256 on done. n < 0 writes
// until the pipe is closed.
func streamSource(w *io.PipeWriter, n int64, seed uint64) <-chan [32]byte {
	done := make(chan [32]byte, 1)
	go func() {
		rng := rand.New(rand.NewChaCha8([32]byte{byte(seed)}))
		h := sha256.New()
		buf := make([]byte, 256<<10)
		for n != 0 {
			chunk := buf[:1+rng.IntN(len(buf))]
			if n > 0 && int64(len(chunk)) > n {
				chunk = chunk[:n]
			}
			for i := range chunk {
				chunk[i] = byte(rng.Uint32())
			}
			if _, err := w.Write(chunk); err != nil {
				w.CloseWithError(err)
				done <- [32]byte{}
				return
			}
			h.Write(chunk)
			n -= int64(len(chunk))
		}
		w.Close()
		done <- [32]byte(h.Sum(nil))
	}()
	return done
}

func noIncomplete(t *testing.T, st *objstore.S3) {
	t.Helper()
	left, err := st.ListIncomplete(testCtx(t), "")
	if err != nil {
		t.Fatalf("list incomplete: %v", err)
	}
	if len(left) != 0 {
		t.Fatalf("incomplete uploads left behind: %q", left)
	}
}

func TestUploadStreamOfUnknownLength(t *testing.T) {
	st, _ := newBucketStore(t)
	ctx := testCtx(t)
	const size = 40<<20 + 12345 // eight full 5 MiB parts and a short tail
	const key = "boxes/b1/snap-1.tar.zst"

	pr, pw := io.Pipe()
	sum := streamSource(pw, size, 1)
	var progress []int64
	res, err := st.Upload(ctx, key, pr, objstore.UploadOptions{
		PartSize:    objstore.MinPartSize,
		Concurrency: 3,
		OnProgress:  func(n int64) { progress = append(progress, n) },
	})
	if err != nil {
		t.Fatalf("upload: %v", err)
	}
	want := <-sum
	if res.Key != key || res.Size != size || res.UploadID == "" || res.ETag == "" || strings.Contains(res.ETag, `"`) {
		t.Errorf("upload result: got %+v, want key, size %d, upload id and unquoted etag", res, size)
	}
	if !res.Checked {
		t.Error("the server's composite CRC32 of the parts was not checked against the bytes sent")
	}
	if len(progress) < 2 || progress[len(progress)-1] != size || !slices.IsSorted(progress) {
		t.Errorf("progress: got %v, want increasing per-part totals ending at %d", progress, size)
	}
	info, err := st.Stat(ctx, key)
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	if info.Size != size {
		t.Errorf("stat size: got %d, want %d", info.Size, size)
	}
	if got := sha256.Sum256(readAll(t, st, key)); got != want {
		t.Errorf("content sha256: got %x, want %x", got, want)
	}
	noIncomplete(t, st)
}

func TestUploadShortStreamIsSinglePut(t *testing.T) {
	st, _ := newBucketStore(t)
	ctx := testCtx(t)
	for _, size := range []int64{0, 1 << 20} {
		pr, pw := io.Pipe()
		sum := streamSource(pw, size, 2)
		var last int64
		res, err := st.Upload(ctx, "small", pr, objstore.UploadOptions{
			PartSize:   objstore.MinPartSize,
			OnProgress: func(n int64) { last = n },
		})
		if err != nil {
			t.Fatalf("upload %d bytes: %v", size, err)
		}
		want := <-sum
		if res.Size != size || res.UploadID != "" || last != size || !res.Checked {
			t.Errorf("upload %d bytes: got %+v and progress %d, want a single put", size, res, last)
		}
		if got := sha256.Sum256(readAll(t, st, "small")); got != want {
			t.Errorf("upload %d bytes: content differs", size)
		}
	}
}

func TestUploadCancelAborts(t *testing.T) {
	st, _ := newBucketStore(t)
	const key = "boxes/b1/cancelled.tar.zst"
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()

	pr, pw := io.Pipe()
	streamSource(pw, -1, 3)
	// The caller's side of the contract: a cancelled upload also closes the
	// pipe, so the producer stops.
	defer pr.Close()
	_, err := st.Upload(ctx, key, pr, objstore.UploadOptions{
		PartSize: objstore.MinPartSize,
		OnProgress: func(n int64) {
			if n >= 10<<20 {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("upload: got %v, want context.Canceled", err)
	}
	noIncomplete(t, st)
	if _, err := st.Stat(testCtx(t), key); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("stat: got %v, want ErrNotFound", err)
	}
}

func TestUploadReadErrorAborts(t *testing.T) {
	st, _ := newBucketStore(t)
	pr, pw := io.Pipe()
	errBroken := errors.New("tar: disk went away")
	go func() {
		pw.Write(make([]byte, 12<<20))
		pw.CloseWithError(errBroken)
	}()
	_, err := st.Upload(testCtx(t), "boxes/b1/broken", pr, objstore.UploadOptions{PartSize: objstore.MinPartSize})
	if !errors.Is(err, errBroken) {
		t.Fatalf("upload: got %v, want %v", err, errBroken)
	}
	noIncomplete(t, st)
}

func TestUploadRejectsBadOptions(t *testing.T) {
	st := newStore(t, "http://127.0.0.1:1") // never contacted
	for _, opts := range []objstore.UploadOptions{{PartSize: 1 << 20}, {Concurrency: -1}} {
		if _, err := st.Upload(testCtx(t), "k", strings.NewReader("x"), opts); err == nil {
			t.Errorf("upload with %+v: got nil error", opts)
		}
	}
	if _, err := st.Upload(testCtx(t), "", strings.NewReader("x"), objstore.UploadOptions{}); err == nil {
		t.Error("upload with empty key: got nil error")
	}
}

// rawClient talks to srv directly, to leave uploads open the way a killed
// worker would.
func rawClient(srv *s3server.Server) *s3.Client {
	return s3.New(s3.Options{
		Region:       s3server.Region,
		BaseEndpoint: aws.String(srv.Endpoint()),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(testAccess, testSecret, ""),
	})
}

func TestAbortIncomplete(t *testing.T) {
	st, srv := newBucketStore(t)
	ctx := testCtx(t)
	raw := rawClient(srv)
	for _, key := range []string{"boxes/b1/snap-2.tar.zst", "other/x"} {
		up, err := raw.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(testBucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("create multipart upload: %v", err)
		}
		_, err = raw.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(testBucket), Key: aws.String(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(1), Body: bytes.NewReader(randomBytes(t, 1<<20)),
		})
		if err != nil {
			t.Fatalf("upload part: %v", err)
		}
	}

	got, err := st.ListIncomplete(ctx, "boxes/")
	if err != nil || !slices.Equal(got, []string{"boxes/b1/snap-2.tar.zst"}) {
		t.Fatalf("list incomplete boxes/: got %q, %v", got, err)
	}
	if n, err := st.AbortIncomplete(ctx, "boxes/", time.Hour); n != 0 || err != nil {
		t.Fatalf("abort incomplete older than an hour: got %d, %v, want 0", n, err)
	}
	if n, err := st.AbortIncomplete(ctx, "boxes/", 0); n != 1 || err != nil {
		t.Fatalf("abort incomplete: got %d, %v, want 1", n, err)
	}
	if n, err := st.AbortIncomplete(ctx, "boxes/", 0); n != 0 || err != nil {
		t.Fatalf("abort incomplete again: got %d, %v, want 0", n, err)
	}
	got, err = st.ListIncomplete(ctx, "")
	if err != nil || !slices.Equal(got, []string{"other/x"}) {
		t.Fatalf("list incomplete after abort: got %q, %v, want only other/x", got, err)
	}
	if _, err := st.AbortIncomplete(ctx, "", -time.Second); err == nil {
		t.Error("abort incomplete with negative age: got nil error")
	}
}

func httpGet(t *testing.T, u string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("get presigned url: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read presigned url: %v", err)
	}
	return resp.StatusCode, body
}

func TestPresignGet(t *testing.T) {
	st, _ := newBucketStore(t)
	ctx := testCtx(t)
	data := randomBytes(t, 300<<10)
	const key = "boxes/b1/snap 3+x.tar.zst" // characters that need escaping
	if err := st.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("put: %v", err)
	}

	u, err := st.PresignGet(ctx, key, time.Minute)
	if err != nil {
		t.Fatalf("presign: %v", err)
	}
	if code, body := httpGet(t, u); code != http.StatusOK || !bytes.Equal(body, data) {
		t.Fatalf("get presigned: status %d, %d bytes, want 200 and %d identical bytes", code, len(body), len(data))
	}

	garbled, _ := url.Parse(u)
	q := garbled.Query()
	sig := []byte(q.Get("X-Amz-Signature"))
	sig[0] ^= 1
	q.Set("X-Amz-Signature", string(sig))
	garbled.RawQuery = q.Encode()
	if code, _ := httpGet(t, garbled.String()); code != http.StatusForbidden {
		t.Errorf("get garbled url: status %d, want 403", code)
	}

	missing, err := st.PresignGet(ctx, "no/such/key", time.Minute)
	if err != nil {
		t.Fatalf("presign missing: %v", err)
	}
	if code, _ := httpGet(t, missing); code != http.StatusNotFound {
		t.Errorf("get missing: status %d, want 404", code)
	}

	short, err := st.PresignGet(ctx, key, time.Second)
	if err != nil {
		t.Fatalf("presign short: %v", err)
	}
	time.Sleep(2100 * time.Millisecond)
	if code, _ := httpGet(t, short); code != http.StatusForbidden {
		t.Errorf("get expired url: status %d, want 403", code)
	}

	for _, ttl := range []time.Duration{0, 500 * time.Millisecond, 8 * 24 * time.Hour} {
		if _, err := st.PresignGet(ctx, key, ttl); err == nil {
			t.Errorf("presign with ttl %v: got nil error", ttl)
		}
	}
}

// TestUploadPartChangedOnTheWayIsRefused: parts go unsigned, so the CRC32 each carries is what
// keeps a byte changed between the worker and the store out of a snapshot.
func TestUploadPartChangedOnTheWayIsRefused(t *testing.T) {
	_, srv := newBucketStore(t)
	target, err := url.Parse(srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	var flipped atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	forward := proxy.Director
	proxy.Director = func(r *http.Request) {
		forward(r)
		if r.Method != http.MethodPut || !r.URL.Query().Has("partNumber") {
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil || len(body) == 0 {
			return
		}
		body[len(body)/2] ^= 0xff
		r.Body = io.NopCloser(bytes.NewReader(body))
		flipped.Add(1)
	}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	st := newStore(t, front.URL)

	pr, pw := io.Pipe()
	streamSource(pw, 3*objstore.MinPartSize, 2)
	_, err = st.Upload(testCtx(t), "boxes/b1/snap-2.tar.zst", pr, objstore.UploadOptions{PartSize: objstore.MinPartSize})
	pr.CloseWithError(errors.New("test over"))
	if err == nil {
		t.Fatal("an upload whose parts were changed on the way succeeded")
	}
	if !strings.Contains(err.Error(), "BadDigest") {
		t.Errorf("upload error: got %v, want the store's BadDigest for a part's CRC32", err)
	}
	if flipped.Load() == 0 {
		t.Fatal("the proxy changed no part: the test proves nothing")
	}
	if _, err := st.Stat(testCtx(t), "boxes/b1/snap-2.tar.zst"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("stat after the refused upload: got %v, want not found", err)
	}
	noIncomplete(t, st)
}
