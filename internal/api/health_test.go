package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/internal/api"
	"github.com/loomhand/cocoonbox/internal/health"
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

// TestStartingRefusesWithTheDependency: while the API waits for a dependency at start, it
// listens already; health says "starting" (and gRPC health NOT_SERVING), and every other request
// is refused as unavailable in its own protocol, naming what the API waits for but not the
// dependency's error (the caller is not authenticated yet). Once it serves, the same calls work.
func TestStartingRefusesWithTheDependency(t *testing.T) {
	var start health.Startup
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tried := make(chan struct{})
	var once sync.Once
	go func() {
		_ = start.Wait(ctx, slog.New(slog.DiscardHandler), "PostgreSQL", func(context.Context) error {
			once.Do(func() { close(tried) })
			return errors.New("dial tcp 10.0.0.7:5432: connection refused")
		})
	}()
	<-tried
	f := serveOpts(t, api.Options{Starting: start.Err, Checks: map[string]api.Check{
		"postgres": func(context.Context) error { return nil },
	}})
	_, _, raw := f.mint(t, "ann", true)

	code, body := f.get(t, "/healthz", "")
	if code != http.StatusServiceUnavailable || body != "{\"status\":\"starting\"}\n" {
		t.Errorf("/healthz while starting: %d %q, want 503 starting", code, body)
	}
	hc := healthpb.NewHealthClient(f.conn(t))
	if r, err := hc.Check(as(t, ""), &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health while starting = %v, %v; want NOT_SERVING", r, err)
	}
	_, err := f.whoami(t, raw)
	if msg := status.Convert(err).Message(); status.Code(err) != codes.Unavailable ||
		msg != "the API is starting: waiting for PostgreSQL; try again shortly" {
		t.Errorf("gRPC call while starting: %v; want unavailable naming PostgreSQL", err)
	}
	code, body = f.get(t, "/v1/boxes/x/files/etc/hostname", raw)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `{"error":{"code":"unavailable"`) ||
		!strings.Contains(body, "waiting for PostgreSQL") || strings.Contains(body, "10.0.0.7") {
		t.Errorf("HTTP route while starting: %d %s; want 503 naming PostgreSQL and not its address", code, body)
	}

	start.Done()
	if _, err := f.whoami(t, raw); err != nil {
		t.Errorf("gRPC call once serving: %v", err)
	}
	code, body = f.get(t, "/healthz", "")
	if code != http.StatusOK {
		t.Errorf("/healthz once serving: %d %q", code, body)
	}
}
