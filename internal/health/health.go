// Package health reports whether a role's dependencies answer, the same way in every role: the
// API and the worker both run named checks at most once per Every, serve the result as /healthz
// JSON and as Prometheus gauges, and wait for their dependencies at start without exiting.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Check reports whether one dependency answers.
type Check func(ctx context.Context) error

// Report is a health result, the body of GET /healthz.
type Report struct {
	Status     string            `json:"status"` // StatusOK, StatusDegraded or StatusStarting
	Version    string            `json:"version,omitempty"`
	Components map[string]string `json:"components,omitempty"` // name → "ok" or the error
}

// The values of Report.Status.
const (
	StatusOK       = "ok"
	StatusDegraded = "degraded" // a dependency does not answer
	StatusStarting = "starting" // the role waits for a dependency before it serves
)

const (
	// CheckTimeout bounds each check so one hung dependency cannot hang a report.
	CheckTimeout = 3 * time.Second
	// Every is how old a result may be before it is computed again: health endpoints need no
	// token, and must not be a way to load PostgreSQL, Temporal and S3.
	Every = 5 * time.Second
)

// Checker runs named checks and keeps the last result. Its zero value has no checks; set the
// fields before the first Report.
type Checker struct {
	Checks  map[string]Check
	Version string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Starting returns nil once the role serves, or what it still waits for; nil means it
	// serves from the start.
	Starting func() error
	// OnPanic turns a check's panic into the text reported for it (after logging it); nil
	// reports "internal error".
	OnPanic func(ctx context.Context, name string, v any) string

	// mu is held while the checks run, so callers that come meanwhile wait for that result
	// instead of running the checks again.
	mu  sync.Mutex
	at  time.Time
	rep *Report
}

// Report returns a result at most Every old, computing it when it is older. The report is
// shared: callers must not change it.
func (c *Checker) Report(ctx context.Context) Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.rep == nil || now.Sub(c.at) >= Every || now.Before(c.at) {
		// Not the caller's context: a caller that hangs up must not leave a failed result for
		// everyone else. Each check is bounded by CheckTimeout.
		rep := c.run(context.WithoutCancel(ctx))
		c.rep, c.at = &rep, now
	}
	return c.starting(*c.rep)
}

// starting marks rep as starting while the role waits, whatever the checks said: a database
// that answers is not yet one whose schema is migrated.
func (c *Checker) starting(rep Report) Report {
	if c.Starting == nil {
		return rep
	}
	if err := c.Starting(); err != nil {
		comps := maps.Clone(rep.Components)
		comps["startup"] = err.Error()
		rep.Status, rep.Components = StatusStarting, comps
	}
	return rep
}

func (c *Checker) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

func (c *Checker) run(ctx context.Context) Report {
	rep := Report{Status: StatusOK, Version: c.Version, Components: make(map[string]string, len(c.Checks))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, check := range c.Checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
			defer cancel()
			res := c.runOne(cctx, name, check)
			mu.Lock()
			defer mu.Unlock()
			rep.Components[name] = res
			if res != StatusOK {
				rep.Status = StatusDegraded
			}
		})
	}
	wg.Wait()
	return rep
}

// runOne runs one check and returns "ok" or its error; a check that panics does not take the
// process down with it.
func (c *Checker) runOne(ctx context.Context, name string, check Check) (res string) {
	defer func() {
		if v := recover(); v != nil {
			res = "internal error"
			if c.OnPanic != nil {
				res = c.OnPanic(ctx, name, v)
			}
		}
	}()
	if err := check(ctx); err != nil {
		return err.Error()
	}
	return StatusOK
}

// WriteJSON writes rep as a /healthz answer: 200 when every component answers, 503 otherwise
// (degraded or starting), so a load balancer needs only the status code.
func WriteJSON(w http.ResponseWriter, rep Report) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if rep.Status != StatusOK {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(w)
	if rep.Components != nil {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(rep)
}

// WriteMetrics writes rep in the Prometheus text format: one gauge per component, 1 when it
// answers, and one for the role's startup, so an alert needs no JSON parsing.
func WriteMetrics(w io.Writer, rep Report) {
	fmt.Fprint(w, "# HELP cocoonbox_component_up Whether a dependency answered its last health check (1) or not (0).\n")
	fmt.Fprint(w, "# TYPE cocoonbox_component_up gauge\n")
	for _, name := range slices.Sorted(maps.Keys(rep.Components)) {
		if name == "startup" {
			continue
		}
		up := 0
		if rep.Components[name] == StatusOK {
			up = 1
		}
		fmt.Fprintf(w, "cocoonbox_component_up{component=%q} %d\n", name, up)
	}
	starting := 0
	if rep.Status == StatusStarting {
		starting = 1
	}
	fmt.Fprint(w, "# HELP cocoonbox_starting Whether the role still waits for a dependency before it serves.\n")
	fmt.Fprint(w, "# TYPE cocoonbox_starting gauge\n")
	fmt.Fprintf(w, "cocoonbox_starting %d\n", starting)
}
