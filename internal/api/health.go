package api

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox"
)

// Check reports whether one component the API depends on is healthy.
type Check func(ctx context.Context) error

// HealthReport is the body of GET /healthz. Without an operator's token only Status is set.
type HealthReport struct {
	Status     string            `json:"status"` // "ok" or "degraded"
	Version    string            `json:"version,omitempty"`
	Components map[string]string `json:"components,omitempty"` // name → "ok" or the error
}

const (
	// checkTimeout bounds each component check so one hung dependency cannot hang /healthz.
	checkTimeout = 3 * time.Second
	// healthEvery is how old a health result may be before it is computed again: /healthz and
	// gRPC health need no token, and must not be a way to load PostgreSQL, Temporal and S3.
	healthEvery = 5 * time.Second
)

// healthCache keeps the last health result; its lock is held while the checks run, so callers
// that come meanwhile wait for that result instead of running the checks again.
type healthCache struct {
	mu  sync.Mutex
	at  time.Time
	rep *HealthReport
}

// cachedHealth returns a health result at most healthEvery old, computing it when it is older.
// The report is shared: callers must not change it.
func (s *Server) cachedHealth(ctx context.Context) HealthReport {
	c := &s.healthCache
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := s.now(); c.rep == nil || now.Sub(c.at) >= healthEvery || now.Before(c.at) {
		// Not the request's context: a caller that hangs up must not leave a failed result for
		// everyone else. Each check is bounded by checkTimeout.
		rep := s.health(context.WithoutCancel(ctx))
		c.rep, c.at = &rep, now
	}
	return *c.rep
}

func (s *Server) health(ctx context.Context) HealthReport {
	rep := HealthReport{Status: "ok", Version: s.version, Components: make(map[string]string, len(s.checks))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, check := range s.checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, checkTimeout)
			defer cancel()
			res := s.runCheck(cctx, name, check)
			mu.Lock()
			defer mu.Unlock()
			rep.Components[name] = res
			if res != "ok" {
				rep.Status = "degraded"
			}
		})
	}
	wg.Wait()
	return rep
}

// runCheck runs one check and returns "ok" or its error; a check that panics is "internal
// error", logged with its stack, and does not take the process down with it.
func (s *Server) runCheck(ctx context.Context, name string, check Check) (res string) {
	defer func() {
		if v := recover(); v != nil {
			_ = s.panicError(ctx, "health check "+name, v)
			res = "internal error"
		}
	}()
	if err := check(ctx); err != nil {
		return err.Error()
	}
	return "ok"
}

// serveHealth answers the cached status; an operator's token adds the version and each
// component's result. Any other token, valid or not, gets the bare status, as a load balancer
// does.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	rep := s.cachedHealth(r.Context())
	if tok := httpBearer(r); tok == "" || s.operator(r, tok) != nil {
		rep = HealthReport{Status: rep.Status}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if rep.Status != "ok" {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	if rep.Components != nil {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(rep)
}

// operator authorizes an operator's request: a token of an admin user.
func (s *Server) operator(r *http.Request, token string) error {
	p, err := s.authorize(r.Context(), token, routeOperator)
	if err != nil {
		return err
	}
	if !p.User.Admin {
		return cocoonbox.Errorf(cocoonbox.EForbidden, "%s is for operators: use an admin user's token", r.URL.Path)
	}
	return nil
}

// operatorOnly serves next to operators only.
func (s *Server) operatorOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.operator(r, httpBearer(r)); err != nil {
			s.writeHTTPError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}
