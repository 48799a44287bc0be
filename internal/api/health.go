package api

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// Check reports whether one component the API depends on is healthy.
type Check func(ctx context.Context) error

// HealthReport is the body of GET /healthz.
type HealthReport struct {
	Status     string            `json:"status"` // "ok" or "degraded"
	Version    string            `json:"version"`
	Components map[string]string `json:"components"` // name → "ok" or the error
}

// checkTimeout bounds each component check so one hung dependency cannot hang /healthz.
const checkTimeout = 3 * time.Second

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

func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	rep := s.health(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if rep.Status != "ok" {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rep)
}
