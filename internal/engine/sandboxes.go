package engine

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// claimed returns every live claimed sandbox, oldest claim first.
func (e *Engine) claimed() []*box {
	e.mu.Lock()
	all := make([]*box, 0, len(e.boxes))
	for _, b := range e.boxes {
		all = append(all, b)
	}
	e.mu.Unlock()
	now := e.now()
	out := all[:0]
	for _, b := range all {
		r, gone := b.snapshot()
		if !gone && !r.Warm && !r.Pending && now.Before(r.Deadline) {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b *box) int {
		ra, _ := a.snapshot()
		rb, _ := b.snapshot()
		if c := ra.ClaimedAt.Compare(rb.ClaimedAt); c != 0 {
			return c
		}
		return strings.Compare(ra.ID, rb.ID)
	})
	return out
}

func row(r record) sandbox.Sandbox {
	return sandbox.Sandbox{
		ID: r.ID, Key: r.Key, Deadline: r.Deadline.UTC(), ClaimedAt: r.ClaimedAt.UTC(),
		Hibernated: r.Hibernated, ClaimRef: r.ClaimRef, FromCheckpoint: r.FromCheckpoint,
	}
}

// handleList lists the caller's sandboxes (all of them for root), never with tokens.
func (e *Engine) handleList(w http.ResponseWriter, r *http.Request, c caller) error {
	ref, filter := r.URL.Query().Get("claim_ref"), r.URL.Query().Has("claim_ref")
	rows := []sandbox.Sandbox{}
	for _, b := range e.claimed() {
		rec, _ := b.snapshot()
		if c.sees(rec.Tenant) && (!filter || rec.ClaimRef == ref) {
			rows = append(rows, row(rec))
		}
	}
	writeJSON(w, http.StatusOK, sandbox.SandboxList{Sandboxes: rows})
	return nil
}

// handleGet is the operator's view of one sandbox; with a root token configured it includes
// the sandbox token, so an operator can adopt a sandbox found by claim_ref.
func (e *Engine) handleGet(w http.ResponseWriter, r *http.Request, c caller) error {
	b := e.lookup(r.PathValue("id"))
	if b == nil {
		return errUnknownSandbox
	}
	rec, _ := b.snapshot()
	out := row(rec)
	if c.root { // only a configured root token makes a root caller; an open engine shows none
		out.Token = rec.Token
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// handleRelease destroys a sandbox. Unknown or already released is 404, which callers treat as
// done.
func (e *Engine) handleRelease(w http.ResponseWriter, r *http.Request) error {
	b, err := e.authorizeBox(r, true)
	if err != nil {
		return err
	}
	if err := e.release(r.Context(), b, "request"); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// release ends a sandbox for reason ("request", "expired"): it is gone to every caller at
// once, its relays and commands are ended, and the runtime destroys the box.
func (e *Engine) release(ctx context.Context, b *box, reason string) error {
	b.mu.Lock()
	if b.gone {
		b.mu.Unlock()
		return errUnknownSandbox
	}
	b.gone = true
	r := b.rec
	b.mu.Unlock()
	e.mu.Lock()
	delete(e.boxes, r.ID)
	e.mu.Unlock()

	unlock := b.lockLifecycle()
	defer unlock()
	e.destroy(ctx, b)
	e.journal.write("release", r, reason)
	e.metrics.count("releases", reason)
	e.log.Info("sandbox released", "id", r.ID, "reason", reason)
	return nil
}

// forget drops a sandbox whose box the runtime no longer has (a host loss, a runtime wiped
// clean): there is nothing to destroy, and callers get 404 from now on, which the box workflow
// reads as "lost: claim a new one and restore".
func (e *Engine) forget(b *box, why error) {
	b.mu.Lock()
	already := b.gone
	b.gone = true
	r := b.rec
	b.mu.Unlock()
	if already {
		return
	}
	e.mu.Lock()
	delete(e.boxes, r.ID)
	e.mu.Unlock()
	e.drop(b)
	e.journal.write("release", r, "lost")
	e.metrics.count("releases", "lost")
	e.log.Warn("sandbox lost: the runtime no longer has its box; dropping the record", "id", r.ID, "err", why)
}

// runtimeError turns a runtime failure on a claimed box into what the caller sees. A box the
// runtime no longer knows is forgotten and answers 404. A box that is not running although the
// engine thought so (it crashed, or was hibernated behind the engine's back) is reconciled with
// the runtime's view and answers 503: the retry wakes it, or starts it again on its disk.
func (e *Engine) runtimeError(ctx context.Context, b *box, op string, err error) error {
	switch {
	case errors.Is(err, runtime.ErrNotFound):
		e.forget(b, err)
		return errUnknownSandbox
	case errors.Is(err, runtime.ErrNotRunning):
		e.reconcile(ctx, b)
		return &apiError{kind: kindUnavailable, msg: "the sandbox was not running; retry to wake it", err: err}
	}
	if diskFull(err) {
		e.log.Error("the engine's disk is full", "op", op, "err", err)
		return &apiError{kind: kindUnavailable, msg: op + " failed: the engine host's disk is full (no space left on device)", err: err}
	}
	return &apiError{kind: kindUnavailable, msg: op + " failed; retry later", err: err}
}

// diskFull reports whether err comes from a write the engine's disk had no room for, as an errno
// or in a runtime command's output (runsc reports it in words).
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		strings.Contains(err.Error(), "no space left on device") || strings.Contains(err.Error(), "disk quota exceeded")
}

// reconcile sets a box's hibernated and stopped flags from what the runtime reports, so the
// next use wakes it the right way: Wake for a memory image, Start for a disk alone.
func (e *Engine) reconcile(ctx context.Context, b *box) {
	r, _ := b.snapshot()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	st, err := e.rt.State(sctx, r.ID, e.boxDir(r.ID))
	if err != nil {
		e.log.Error("read box state", "id", r.ID, "err", err)
		return
	}
	switch st {
	case runtime.StateMissing:
		e.forget(b, errors.New("the runtime reports the box missing"))
		return
	case runtime.StateRunning:
		return
	}
	b.mu.Lock()
	changed := !b.rec.Hibernated
	b.rec.Hibernated = true
	b.stopped = st == runtime.StateStopped
	b.mu.Unlock()
	e.log.Warn("box is not running; marked to wake on its next use", "id", r.ID, "state", st)
	if changed {
		if err := e.save(b); err != nil {
			e.log.Error("save reconciled record", "id", r.ID, "err", err)
		}
	}
}

// handleStats reports one sandbox's resource use. A hibernated box uses no memory and is not
// woken to be measured.
func (e *Engine) handleStats(w http.ResponseWriter, r *http.Request, _ caller) error {
	b := e.lookup(r.PathValue("id"))
	if b == nil {
		return errUnknownSandbox
	}
	rec, _ := b.snapshot()
	sz := cocoonbox.Size(rec.Key.Size).Spec()
	out := sandbox.Stats{
		ID: rec.ID, CPUCount: sz.VCPUs, MemTotalBytes: int64(sz.MemoryMB) << 20,
		Hibernated: rec.Hibernated, MeasuredAt: e.now().UTC(),
	}
	if !rec.Hibernated {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		st, err := e.rt.Stats(ctx, rec.ID)
		if err != nil {
			return e.runtimeError(ctx, b, "stats", err)
		}
		out.MemUsedBytes, out.MemUsedMeasured = st.MemUsedBytes, true
		if st.DiskMeasured {
			out.DiskUsedBytes, out.DiskTotalBytes = st.DiskUsedBytes, st.DiskBytes
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
