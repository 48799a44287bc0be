package engine

import (
	"context"
	"net/http"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// handleRenew moves a sandbox's deadline to now + ttl_seconds (0: the default, above a day:
// clamped) and answers the deadline granted. Renewing does not wake a hibernated sandbox: the
// lease runs the same either way.
func (e *Engine) handleRenew(w http.ResponseWriter, r *http.Request) error {
	b, err := e.authorizeBox(r, true)
	if err != nil {
		return err
	}
	var req sandbox.RenewRequest
	if err := decode(w, r, &req, bodyOptional); err != nil {
		return err
	}
	ttl, err := leaseTTL(req.TTLSeconds)
	if err != nil {
		return err
	}
	b.mu.Lock()
	if b.gone {
		b.mu.Unlock()
		return errUnknownSandbox
	}
	b.rec.Deadline = e.now().Add(ttl)
	deadline := b.rec.Deadline
	b.mu.Unlock()
	if err := e.save(b); err != nil {
		// Without the write a restart would reap at the old deadline; the caller must retry.
		return err
	}
	writeJSON(w, http.StatusOK, sandbox.RenewResponse{Deadline: deadline.UTC()})
	return nil
}

// reapLoop runs the reaper and the idle sweep every tick until ctx ends.
func (e *Engine) reapLoop(ctx context.Context) {
	t := time.NewTicker(e.tick)
	defer t.Stop()
	for {
		e.reap(ctx)
		e.idleSweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reap releases every claimed sandbox past its deadline, hibernated or not, and retries the
// destroys that failed before.
func (e *Engine) reap(ctx context.Context) {
	now := e.now()
	e.mu.Lock()
	var expired, doomed []*box
	for _, b := range e.boxes {
		b.mu.Lock()
		if !b.gone && !b.rec.Warm && !b.rec.Pending && !now.Before(b.rec.Deadline) {
			expired = append(expired, b)
		}
		b.mu.Unlock()
	}
	for _, b := range e.doomed {
		doomed = append(doomed, b)
	}
	e.mu.Unlock()
	for _, b := range expired {
		if ctx.Err() != nil {
			return
		}
		_ = e.release(ctx, b, "expired") // errUnknownSandbox: someone released it first
	}
	for _, b := range doomed {
		e.destroy(ctx, b)
	}
}
