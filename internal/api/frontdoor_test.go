package api_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/api"
)

// inflatingBody is a gzip stream that inflates to a JSON request of size bytes: a string field
// holding size bytes of 'a', about a thousandth of that compressed.
func inflatingBody(t *testing.T, size int) []byte {
	t.Helper()
	var z bytes.Buffer
	zw, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = zw.Write([]byte(`{"name":"`))
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	for range size >> 20 {
		_, _ = zw.Write(chunk)
	}
	_, _ = zw.Write([]byte(`"}`))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return z.Bytes()
}

// postGzip posts body as a gzip-encoded Connect JSON call and returns the status, the answer
// and how many bytes the process allocated while the call was made (client and server: both
// are in this process, so the figure over-counts the server).
func (f fixture) postGzip(t *testing.T, path, token string, body []byte) (int, string, uint64) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+f.addr+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	runtime.ReadMemStats(&after)
	return resp.StatusCode, string(b), after.TotalAlloc - before.TotalAlloc
}

// TestUnauthenticatedGzipBombIsCheap: a request without a valid token is refused from its
// headers, before anything reads, inflates or decodes its body; with a token, a body that
// inflates past the message limit is refused naming the limit, not inflated to the end.
func TestUnauthenticatedGzipBombIsCheap(t *testing.T) {
	f := serveOpts(t, api.Options{})
	_, _, token := f.mint(t, "ann", false)
	bomb := inflatingBody(t, 64<<20)
	const path = "/cocoonbox.v1.AccountService/CreateToken"

	// Warm the client's connection and the server's pools, so the measured call counts only
	// what the call itself costs.
	f.postGzip(t, path, "", bomb)
	for _, tok := range []string{"", "cbx_" + strings.Repeat("a", 52)} {
		code, body, alloc := f.postGzip(t, path, tok, bomb)
		t.Logf("token %q: %d, allocated %d bytes for a %d-byte body", tok, code, alloc, len(bomb))
		if code != http.StatusUnauthorized && code != http.StatusRequestEntityTooLarge {
			t.Errorf("token %q: answered %d %s, want 401 or 413", tok, code, body)
		}
		if alloc >= 2*uint64(len(bomb)) {
			t.Errorf("token %q: allocated %d bytes, want under 2x the %d compressed bytes", tok, alloc, len(bomb))
		}
	}

	// With a token the body is read, and inflated only as far as the limit: the cost follows
	// the limit, not how far the body would inflate.
	big := inflatingBody(t, 256<<20)
	code, body, alloc := f.postGzip(t, path, token, big)
	t.Logf("with a token: %d %s, allocated %d bytes for a %d-byte body", code, body, alloc, len(big))
	var e connectError
	_ = json.Unmarshal([]byte(body), &e)
	if code != http.StatusTooManyRequests || e.Code != "resource_exhausted" || !strings.Contains(e.Message, "limit") {
		t.Errorf("with a token: %d %s, want 429 resource_exhausted naming the limit", code, body)
	}
	if alloc >= 128<<20 {
		t.Errorf("with a token: allocated %d bytes, want under half the 256 MiB the body inflates to", alloc)
	}
}
