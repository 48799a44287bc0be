package engine

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
)

// handleHibernate frees a sandbox's CPU and memory; 204 also when it already sleeps.
func (e *Engine) handleHibernate(w http.ResponseWriter, r *http.Request) error {
	b, err := e.authorizeBox(r, true)
	if err != nil {
		return err
	}
	if err := e.hibernate(r.Context(), b, "request"); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// handleWake brings a sandbox back; 204 also when it is already running.
func (e *Engine) handleWake(w http.ResponseWriter, r *http.Request) error {
	b, err := e.authorizeBox(r, true)
	if err != nil {
		return err
	}
	if err := e.wake(r.Context(), b, "request"); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// hibernate ends the box's relays and commands, then asks the runtime to hibernate it.
func (e *Engine) hibernate(ctx context.Context, b *box, trigger string) error {
	unlock := b.lockLifecycle()
	defer unlock()
	return e.hibernateLocked(ctx, b, trigger)
}

// hibernateLocked hibernates b; the caller holds b.op exclusively.
func (e *Engine) hibernateLocked(ctx context.Context, b *box, trigger string) error {
	r, gone := b.snapshot()
	switch {
	case gone:
		return errUnknownSandbox
	case r.Hibernated:
		return nil
	}
	hctx, cancel := lifecycleCtx(ctx)
	defer cancel()
	t0 := time.Now()
	err := e.rt.Hibernate(hctx, r.ID)
	e.metrics.observe("hibernate", time.Since(t0), err)
	if errors.Is(err, runtime.ErrNotRunning) {
		e.reconcile(hctx, b)
		if r, gone := b.snapshot(); !gone && r.Hibernated {
			return nil // it stopped on its own; it sleeps either way
		}
	}
	if err != nil {
		return e.runtimeError(hctx, b, "hibernate", err)
	}
	b.mu.Lock()
	b.rec.Hibernated = true
	r = b.rec
	b.mu.Unlock()
	if err := e.save(b); err != nil {
		// The runtime state is the truth on restart (adopt reconciles the flag), so a failed
		// write costs nothing but this log line.
		e.log.Error("save hibernated record", "id", r.ID, "err", err)
	}
	e.journal.write("hibernate", r, trigger)
	e.metrics.count("hibernations", trigger)
	return nil
}

// wake brings a hibernated box back; trigger says why ("request", "exec", "relay",
// "checkpoint"). A box whose processes died with its host (stopped) is started again on its
// kept disk instead: its memory is lost, its files are not.
func (e *Engine) wake(ctx context.Context, b *box, trigger string) error {
	// Holding gate keeps new data-plane users out. A box that is not hibernated needs nothing,
	// and one that is has no users to wait for, so op is taken only in that case and wake never
	// waits behind an open relay.
	b.gate.Lock()
	r, gone := b.snapshot()
	if gone {
		b.gate.Unlock()
		return errUnknownSandbox
	}
	if !r.Hibernated {
		b.gate.Unlock()
		return nil
	}
	b.op.Lock()
	b.gate.Unlock()
	defer b.op.Unlock()

	b.mu.Lock()
	r, gone, stopped := b.rec, b.gone, b.stopped
	b.mu.Unlock()
	switch {
	case gone:
		return errUnknownSandbox
	case !r.Hibernated:
		return nil
	}
	wctx, cancel := lifecycleCtx(ctx)
	defer cancel()
	t0 := time.Now()
	var err error
	if !stopped {
		err = e.rt.Wake(wctx, r.ID)
		if errors.Is(err, runtime.ErrNotRunning) { // no memory image left: only the disk
			st, serr := e.rt.State(wctx, r.ID, e.boxDir(r.ID))
			stopped = serr == nil && st == runtime.StateStopped
		}
	}
	if stopped {
		var rootfs string
		if rootfs, err = e.rootfs(r.Key.Template); err == nil {
			err = e.rt.Start(wctx, e.spec(r, rootfs))
		}
	}
	e.metrics.observe("wake", time.Since(t0), err)
	if err != nil {
		return e.runtimeError(wctx, b, "wake", err)
	}
	b.mu.Lock()
	b.rec.Hibernated, b.stopped = false, false
	b.lastActive = e.now()
	r = b.rec
	b.mu.Unlock()
	if err := e.save(b); err != nil {
		e.log.Error("save woken record", "id", r.ID, "err", err)
	}
	e.journal.write("wake", r, trigger)
	e.metrics.count("wakes", trigger)
	return nil
}

// idleSweep hibernates claimed boxes of pools with idle_hibernate_seconds that had no
// data-plane activity for that long. A box in use — an open relay, a running command — is
// skipped without waiting: TryLock fails while any hold exists.
func (e *Engine) idleSweep(ctx context.Context) {
	now := e.now()
	for _, b := range e.claimed() {
		b.mu.Lock()
		idle := time.Duration(b.rec.IdleHibernateSeconds) * time.Second
		due := idle > 0 && !b.rec.Hibernated && len(b.holds) == 0 && now.Sub(b.lastActive) >= idle
		b.mu.Unlock()
		if !due || !b.gate.TryLock() {
			continue
		}
		locked := b.op.TryLock()
		b.gate.Unlock()
		if !locked {
			continue
		}
		b.mu.Lock()
		still := !b.gone && !b.rec.Hibernated && len(b.holds) == 0 && e.now().Sub(b.lastActive) >= idle
		b.mu.Unlock()
		if still {
			if err := e.hibernateLocked(ctx, b, "idle"); err != nil {
				e.log.Warn("idle hibernate failed", "id", b.rec.ID, "err", err)
			}
		}
		b.op.Unlock()
	}
}
