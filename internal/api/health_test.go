package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/loomhand/cocoonbox/internal/api"
)

// testClock is a clock a test moves by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// get sends a GET with token ("" for none) and returns the status and body.
func (f fixture) get(t *testing.T, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+f.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHealthzCachedAndBare: without an operator's token /healthz answers a bare status from a
// result at most a few seconds old, however often it is asked, so it cannot be used to load the
// dependencies; an operator (an admin user) gets the components; /metrics needs an operator.
func TestHealthzCachedAndBare(t *testing.T) {
	var runs atomic.Int64
	clock := &testClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	f := serveOpts(t, api.Options{Now: clock.Now, Version: "test", Checks: map[string]api.Check{
		"postgres": func(context.Context) error { runs.Add(1); return nil },
	}})
	_, _, admin := f.mint(t, "ops", true)
	_, _, user := f.mint(t, "ann", false)

	for range 20 {
		code, body := f.get(t, "/healthz", "")
		if code != http.StatusOK || body != "{\"status\":\"ok\"}\n" {
			t.Fatalf("/healthz without a token: %d %q, want 200 and the bare status", code, body)
		}
	}
	if code, body := f.get(t, "/healthz", user); code != http.StatusOK || body != "{\"status\":\"ok\"}\n" {
		t.Errorf("/healthz with a non-admin token: %d %q, want the bare status", code, body)
	}
	hc := healthpb.NewHealthClient(f.conn(t))
	if r, err := hc.Check(as(t, ""), &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health Check = %v, %v", r, err)
	}
	code, body := f.get(t, "/healthz", admin)
	var rep api.HealthReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil || code != http.StatusOK || rep.Components["postgres"] != "ok" || rep.Version != "test" {
		t.Errorf("/healthz for an operator: %d %s, want the components", code, body)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the checks ran %d times for 23 asks within a few seconds, want 1", n)
	}
	clock.Add(time.Minute)
	f.get(t, "/healthz", "")
	if n := runs.Load(); n != 2 {
		t.Errorf("after a minute the checks ran %d times in all, want 2", n)
	}

	if code, _ := f.get(t, "/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", code)
	}
	if code, _ := f.get(t, "/metrics", user); code != http.StatusForbidden {
		t.Errorf("/metrics for a non-admin: %d, want 403", code)
	}
	if code, body := f.get(t, "/metrics", admin); code != http.StatusOK {
		t.Errorf("/metrics for an operator: %d %s, want 200", code, body)
	}
}
