package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/engine/images"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// The local engine gives a box no NIC, so "none" is its only lane; an empty size is upstream's
// default, sandbox.SizeSmall (not cocoonbox.DefaultSize, which is the default of a user's box).
const maxClaimRef = 256

// templateRe is a conservative template name: it reaches Images and so, possibly, a path.
var templateRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._:/-]{0,62}$`)

// leaseTTL turns a request's ttl_seconds into a lease length.
func leaseTTL(seconds int) (time.Duration, error) {
	switch {
	case seconds < 0:
		return 0, invalid("ttl_seconds: must not be negative, got %d", seconds)
	case seconds == 0:
		return sandbox.DefaultTTL, nil
	case seconds > int(sandbox.MaxTTL/time.Second): // compared in seconds: a huge value must not overflow
		return sandbox.MaxTTL, nil
	}
	return time.Duration(seconds) * time.Second, nil
}

// parseKey validates a (template, net, size) triple and fills the defaults. It does not ask
// Images whether the template exists; rootfs does.
func (e *Engine) parseKey(template, net, size string) (sandbox.PoolKey, error) {
	switch {
	case template == "":
		return sandbox.PoolKey{}, invalid("template: is required")
	case !templateRe.MatchString(template) || strings.Contains(template, ".."):
		return sandbox.PoolKey{}, invalid("template: unknown template %q", template)
	}
	switch net {
	case "", sandbox.NetNone:
		net = sandbox.NetNone
	case sandbox.NetEgress:
		if !e.networked() {
			return sandbox.PoolKey{}, invalid("net: this engine has no uplink (its network_uplink is not set), so only the %q lane; %q is not available here", sandbox.NetNone, sandbox.NetEgress)
		}
	default:
		return sandbox.PoolKey{}, invalid("net: unknown lane %q, want %q or %q", net, sandbox.NetNone, sandbox.NetEgress)
	}
	if size == "" {
		size = sandbox.SizeSmall
	}
	if err := cocoonbox.Size(size).Validate(); err != nil {
		return sandbox.PoolKey{}, invalid("%s", cocoonbox.ErrorMessage(err))
	}
	return sandbox.PoolKey{Template: template, Net: net, Size: size}, nil
}

// rootfs resolves a template through Images: unknown is the caller's mistake (400); a known
// template whose image cannot be had now (not built yet, say) is 503, with the cause in the
// log for the operator.
func (e *Engine) rootfs(template string) (string, error) {
	dir, err := e.images(template)
	if errors.Is(err, fs.ErrNotExist) {
		return "", invalid("template: unknown template %q", template)
	}
	if errors.Is(err, images.ErrNotBuilt) {
		// Said to callers without the host path the error carries, which the log keeps.
		return "", &apiError{kind: kindUnavailable, msg: fmt.Sprintf("template %q is not available on this engine now: its image is not built (the operator runs make image)", template), err: err}
	}
	if err != nil {
		return "", &apiError{kind: kindUnavailable, msg: fmt.Sprintf("template %q is not available on this engine now", template), err: err}
	}
	return dir, nil
}

func (e *Engine) handleClaim(w http.ResponseWriter, r *http.Request, c caller) error {
	var req sandbox.ClaimRequest
	if err := decode(w, r, &req, bodyRequired); err != nil {
		return err
	}
	key, err := e.parseKey(req.Template, req.Net, req.Size)
	if err != nil {
		return err
	}
	egress, err := egressOf(key, req.Egress)
	if err != nil {
		return err
	}
	ttl, err := leaseTTL(req.TTLSeconds)
	if err != nil {
		return err
	}
	if len(req.ClaimRef) > maxClaimRef {
		return invalid("claim_ref: longer than %d bytes", maxClaimRef)
	}
	b, start, err := e.claim(r.Context(), c, key, ttl, req.ClaimRef)
	if err != nil {
		return err
	}
	if egress.Policy != runtime.EgressInternet { // the policy a networked box starts with
		if err := e.setEgress(r.Context(), b, egress); err != nil {
			e.discard(r.Context(), b)
			return err
		}
	}
	resp := e.claimResponse(b)
	resp.Start = start
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// claim hands out a warm box of key if one is ready, else starts one cold, and says which
// (sandbox.StartWarm, sandbox.StartCold).
func (e *Engine) claim(ctx context.Context, c caller, key sandbox.PoolKey, ttl time.Duration, claimRef string) (*box, string, error) {
	start := time.Now()
	if b := e.popWarm(key); b != nil {
		e.kickFill()
		e.keepReady(b.rec.ID, false) // a claimed box's mux stops when idle, as any box's
		if err := e.finishClaim(b, c, ttl, claimRef, ""); err != nil {
			e.discard(ctx, b)
			return nil, "", err
		}
		e.metrics.claimed(sandbox.StartWarm, time.Since(start))
		return b, sandbox.StartWarm, nil
	}
	rootfs, err := e.rootfs(key.Template)
	if err != nil {
		return nil, "", err
	}
	b, err := e.reserve(key)
	if err != nil {
		return nil, "", err
	}
	if err := e.start(ctx, b, rootfs); err != nil {
		return nil, "", err
	}
	if err := e.finishClaim(b, c, ttl, claimRef, ""); err != nil {
		e.discard(ctx, b)
		return nil, "", err
	}
	e.metrics.claimed(sandbox.StartCold, time.Since(start))
	return b, sandbox.StartCold, nil
}

// reserve creates the record of a box about to start (pending, so a crash before the start finishes
// is cleaned up by the next engine) and counts it against the engine's limits (admitLocked).
func (e *Engine) reserve(key sandbox.PoolKey) (*box, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, errClosed
	}
	if err := e.admitLocked(key); err != nil {
		e.mu.Unlock()
		return nil, err
	}
	b := e.newBoxLocked(key)
	e.mu.Unlock()
	if err := e.save(b); err != nil {
		e.mu.Lock()
		delete(e.boxes, b.rec.ID)
		e.mu.Unlock()
		return nil, err
	}
	return b, nil
}

// newBoxLocked registers a pending box of key under a fresh id; the caller holds e.mu.
func (e *Engine) newBoxLocked(key sandbox.PoolKey) *box {
	id := newSandboxID()
	for e.boxes[id] != nil {
		id = newSandboxID()
	}
	b := newBox(record{Version: recordVersion, ID: id, Key: key, Pending: true}, e.now())
	e.boxes[id] = b
	return b
}

// spec is what the runtime needs to start (or restart) a box.
func (e *Engine) spec(r record, rootfs string) runtime.Spec {
	sz := cocoonbox.Size(r.Key.Size).Spec()
	if e.diskMB > 0 {
		sz.DiskMB = e.diskMB
	}
	spec := runtime.Spec{ID: r.ID, Dir: e.boxDir(r.ID), Rootfs: rootfs, VCPUs: sz.VCPUs, MemoryMB: sz.MemoryMB, DiskMB: sz.DiskMB}
	if r.Key.Net == sandbox.NetEgress {
		// Every networked box starts on the internet policy (a warm one cannot know its claim's);
		// a claim that asks for another sets it before it answers.
		spec.Net = &runtime.NetSpec{Egress: runtime.Egress{Policy: runtime.EgressInternet}}
	}
	return spec
}

// start starts a reserved box. On failure the box is discarded and the caller sees a 503: a
// claim that failed left nothing behind, so retrying it is safe.
func (e *Engine) start(ctx context.Context, b *box, rootfs string) error {
	r, _ := b.snapshot()
	sctx, cancel := lifecycleCtx(ctx)
	defer cancel()
	t0 := time.Now()
	err := e.rt.Start(sctx, e.spec(r, rootfs))
	e.metrics.observe("start", time.Since(t0), err)
	if err != nil {
		e.discard(ctx, b)
		return &apiError{kind: kindUnavailable, msg: "could not start a sandbox; retry later", err: err}
	}
	return nil
}

// restore is start for a claim from a checkpoint with memory: the box goes on from the
// checkpoint's processes (runtime.Forker.Restore) instead of booting.
func (e *Engine) restore(ctx context.Context, b *box, rootfs, src string) error {
	forker, ok := e.rt.(runtime.Forker)
	if !ok {
		e.discard(ctx, b)
		return newError(kindConflict, "the checkpoint holds memory, which the %s runtime cannot restore", e.rt.Name())
	}
	r, _ := b.snapshot()
	sctx, cancel := lifecycleCtx(ctx)
	defer cancel()
	t0 := time.Now()
	err := forker.Restore(sctx, e.spec(r, rootfs), src)
	e.metrics.observe("restore_fork", time.Since(t0), err)
	if err != nil {
		e.discard(ctx, b)
		return &apiError{kind: kindUnavailable, msg: "could not restore a sandbox from the checkpoint; retry later", err: err}
	}
	return nil
}

// finishClaim turns a started box into a claimed sandbox: a fresh token, the lease, the owner.
func (e *Engine) finishClaim(b *box, c caller, ttl time.Duration, claimRef, fromCheckpoint string) error {
	now := e.now()
	idle := e.idleFor(b.rec.Key)
	b.mu.Lock()
	b.rec.Token = newSandboxToken()
	b.rec.Tenant = c.tenant
	b.rec.ClaimRef = claimRef
	b.rec.ClaimedAt = now
	b.rec.Deadline = now.Add(ttl)
	b.rec.Warm, b.rec.Pending = false, false
	b.rec.IdleHibernateSeconds = idle
	b.rec.FromCheckpoint = fromCheckpoint
	b.lastActive = now
	r := b.rec
	b.mu.Unlock()
	if err := e.save(b); err != nil {
		return err
	}
	e.journal.write("claim", r, "")
	return nil
}

func (e *Engine) claimResponse(b *box) sandbox.ClaimResponse {
	r, _ := b.snapshot()
	return sandbox.ClaimResponse{ID: r.ID, Token: r.Token, Deadline: r.Deadline.UTC(), OwnerAddr: e.ownerAddr, FromCheckpoint: r.FromCheckpoint}
}

// discard destroys a box that never became (or no longer is) a usable sandbox, and forgets it.
func (e *Engine) discard(ctx context.Context, b *box) {
	b.mu.Lock()
	b.gone = true
	id := b.rec.ID
	b.mu.Unlock()
	e.mu.Lock()
	delete(e.boxes, id)
	e.mu.Unlock()
	e.destroy(ctx, b)
}

// destroy removes a gone box from the runtime and its record from disk. If the runtime fails,
// the record stays (marked released) and the reaper retries, so no box is leaked.
func (e *Engine) destroy(ctx context.Context, b *box) {
	dctx, cancel := lifecycleCtx(ctx)
	defer cancel()
	b.mu.Lock()
	id := b.rec.ID
	b.mu.Unlock()
	t0 := time.Now()
	err := e.rt.Destroy(dctx, id)
	e.metrics.observe("destroy", time.Since(t0), err)
	if err != nil {
		e.log.Error("destroy box failed; will retry", "id", id, "err", err)
		b.mu.Lock()
		b.rec.Released = true
		b.mu.Unlock()
		if err := e.save(b); err != nil {
			e.log.Error("save released record", "id", id, "err", err)
		}
		e.mu.Lock()
		e.doomed[id] = b
		e.mu.Unlock()
		return
	}
	// A runtime forgets nothing it started, but a box it never started (a seeded checkpoint
	// claim whose start failed) leaves a directory only the engine knows about.
	if err := os.RemoveAll(e.boxDir(id)); err != nil {
		e.log.Error("remove box directory", "id", id, "err", err)
	}
	e.drop(b)
	e.mu.Lock()
	delete(e.doomed, id)
	e.mu.Unlock()
}
