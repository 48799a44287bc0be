package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/enginetest"
	"github.com/loomhand/cocoonbox/internal/engine/images"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

const (
	rootToken = "root-secret"
	tenantA   = "tenant-a-secret"
	tenantB   = "tenant-b-secret"
)

// clock is the engine's injected time: it moves only when a test says so.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// harness is an engine over the fake runtime, served on a real loopback listener.
type harness struct {
	t      *testing.T
	rt     *enginetest.Runtime
	dir    string
	clock  *clock
	opts   engine.Options
	eng    *engine.Engine
	srv    *httptest.Server
	rootfs string
}

// newHarness starts an engine with a root token and two tenants; mods adjust its options.
func newHarness(t *testing.T, mods ...func(*engine.Options)) *harness {
	t.Helper()
	h := &harness{
		t: t, rt: enginetest.New(), dir: t.TempDir(),
		clock:  &clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)},
		rootfs: t.TempDir(),
	}
	t.Cleanup(h.rt.Close)
	h.opts = engine.Options{
		Dir: h.dir, Runtime: h.rt, Images: h.images, RootToken: rootToken,
		TenantTokens: []string{tenantA, tenantB}, Now: h.clock.Now, OwnerAddr: "127.0.0.1:7777",
	}
	for _, m := range mods {
		m(&h.opts)
	}
	h.start()
	return h
}

func (h *harness) images(template string) (string, error) {
	switch template {
	case "base", "desktop":
		return h.rootfs, nil
	case "unbuilt":
		return "", fmt.Errorf("image %s %w: run make image (looked for /secret/host/path)", template, images.ErrNotBuilt)
	}
	return "", fmt.Errorf("image %s: %w", template, engine.ErrUnknownTemplate)
}

func (h *harness) start() {
	h.t.Helper()
	e, err := engine.New(h.opts)
	if err != nil {
		h.t.Fatalf("new engine: %v", err)
	}
	h.eng = e
	h.srv = httptest.NewServer(e.Handler())
	srv := h.srv
	h.t.Cleanup(func() {
		srv.Close()
		_ = e.Close()
	})
}

// crash drops the engine as SIGKILL would (no Close, the listener gone) and starts a new one on
// the same directory and runtime.
func (h *harness) crash() {
	h.t.Helper()
	h.srv.CloseClientConnections()
	h.srv.Close()
	h.start()
}

func (h *harness) tick() { h.eng.Tick(context.Background()) }

// call sends a request; body is nil, a raw string, or a value to encode as JSON.
func (h *harness) call(method, path, token string, body any) (int, []byte, http.Header) {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data, resp.Header
}

// must sends a request that must answer want, and returns the body.
func (h *harness) must(want int, method, path, token string, body any) []byte {
	h.t.Helper()
	code, data, _ := h.call(method, path, token, body)
	if code != want {
		h.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, code, want, data)
	}
	return data
}

func decodeAs[T any](t *testing.T, data []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, data, err)
	}
	return v
}

// claim claims a sandbox of template base as token (root by default).
func (h *harness) claim(token string, req sandbox.ClaimRequest) sandbox.ClaimResponse {
	h.t.Helper()
	if req.Template == "" {
		req.Template = "base"
	}
	return decodeAs[sandbox.ClaimResponse](h.t, h.must(200, "POST", "/v1/claim", token, req))
}

func (h *harness) exec(sb sandbox.ClaimResponse, argv ...string) sandbox.ExecResult {
	h.t.Helper()
	data := h.must(200, "POST", "/v1/sandboxes/"+sb.ID+"/exec", sb.Token, sandbox.ExecRequest{Argv: argv})
	return decodeAs[sandbox.ExecResult](h.t, data)
}

func (h *harness) list(token, query string) []sandbox.Sandbox {
	h.t.Helper()
	return decodeAs[sandbox.SandboxList](h.t, h.must(200, "GET", "/v1/sandboxes"+query, token, nil)).Sandboxes
}

func (h *harness) row(id string) sandbox.Sandbox {
	h.t.Helper()
	return decodeAs[sandbox.Sandbox](h.t, h.must(200, "GET", "/v1/sandboxes/"+id, rootToken, nil))
}

func (h *harness) info() sandbox.Info {
	h.t.Helper()
	return decodeAs[sandbox.Info](h.t, h.must(200, "GET", "/v1/info", rootToken, nil))
}

// journal returns the usage journal's events as "event id reason".
func (h *harness) journal() []string {
	h.t.Helper()
	data, err := os.ReadFile(filepath.Join(h.dir, "usage.jsonl"))
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var ev struct{ Event, ID, Reason, Size string }
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			h.t.Fatalf("journal line %q: %v", line, err)
		}
		if ev.Size == "" {
			h.t.Fatalf("journal line without size: %q", line)
		}
		out = append(out, strings.TrimSpace(ev.Event+" "+ev.ID+" "+ev.Reason))
	}
	return out
}

// records lists the record files on disk.
func (h *harness) records() []string {
	h.t.Helper()
	ents, err := os.ReadDir(filepath.Join(h.dir, "records"))
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// state is everything a rejected request must leave unchanged.
type state struct {
	boxes, records, journal []string
	rows                    string
	checkpoints             string
}

func (h *harness) state() state {
	h.t.Helper()
	rows, _ := json.Marshal(h.list(rootToken, ""))
	cks := h.must(200, "GET", "/v1/checkpoints", rootToken, nil)
	return state{boxes: h.rt.Boxes(), records: h.records(), journal: h.journal(), rows: string(rows), checkpoints: string(cks)}
}

func (h *harness) unchanged(before state, what string) {
	h.t.Helper()
	after := h.state()
	if !slices.Equal(before.boxes, after.boxes) || !slices.Equal(before.records, after.records) ||
		!slices.Equal(before.journal, after.journal) || before.rows != after.rows || before.checkpoints != after.checkpoints {
		h.t.Errorf("%s changed state:\nbefore %+v\nafter  %+v", what, before, after)
	}
}

// errorOf decodes a {"error":…} body, failing on any other shape.
func errorOf(t *testing.T, data []byte) string {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal(data, &body); err != nil || len(body) != 1 {
		t.Fatalf("error body %s: want exactly {\"error\":…}", data)
	}
	msg, ok := body["error"].(string)
	if !ok || msg == "" {
		t.Fatalf("error body %s: no error message", data)
	}
	return msg
}
