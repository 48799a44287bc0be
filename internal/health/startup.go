package health

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Startup is what a role still waits for before it serves. A role that starts while PostgreSQL
// or Temporal is down keeps running, reports "starting" and waits for them (as a service
// manager that starts every role at once expects), instead of exiting and being restarted in
// a loop. Its zero value waits for nothing yet.
type Startup struct {
	mu   sync.Mutex
	wait *WaitError // nil once served
	done bool
}

// WaitError says which dependency a role waits for, and why the last try failed.
type WaitError struct {
	Dep   string // a name for people: "PostgreSQL", "Temporal"
	Cause error  // the last try's error; nil before the first try ends
}

func (e *WaitError) Error() string {
	if e.Cause == nil {
		return "waiting for " + e.Dep
	}
	return "waiting for " + e.Dep + ": " + e.Cause.Error()
}

func (e *WaitError) Unwrap() error { return e.Cause }

// Err returns nil once the role serves, or a *WaitError naming what it waits for.
func (s *Startup) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil
	}
	if s.wait == nil {
		return &WaitError{Dep: "its dependencies"}
	}
	w := *s.wait
	return &w
}

// Done marks the role as serving.
func (s *Startup) Done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
}

func (s *Startup) set(w *WaitError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wait = w
}

const (
	// firstRetry and maxRetry bound the wait between tries: quick at first, for a dependency
	// that starts beside the role, and at most a few seconds once it is clearly down.
	firstRetry = 200 * time.Millisecond
	maxRetry   = 5 * time.Second
	// tryTimeout bounds one try, so a dependency that accepts and never answers is tried again.
	tryTimeout = 30 * time.Second
	// logEvery is how often an unchanged failure is logged again.
	logEvery = 30 * time.Second
)

// Wait calls try until it returns nil or ctx ends, reporting dep as what the role waits for
// meanwhile. Failures are logged when they change and every logEvery otherwise.
func (s *Startup) Wait(ctx context.Context, logger *slog.Logger, dep string, try func(context.Context) error) error {
	s.set(&WaitError{Dep: dep})
	delay := firstRetry
	var lastMsg string
	var lastLog time.Time
	for {
		tctx, cancel := context.WithTimeout(ctx, tryTimeout)
		err := try(tctx)
		cancel()
		if err == nil {
			if lastMsg != "" {
				logger.InfoContext(ctx, "dependency answers", "dependency", dep)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.set(&WaitError{Dep: dep, Cause: err})
		if msg := err.Error(); msg != lastMsg || time.Since(lastLog) >= logEvery {
			logger.WarnContext(ctx, "waiting for a dependency", "dependency", dep, "err", err)
			lastMsg, lastLog = msg, time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, maxRetry)
	}
}
