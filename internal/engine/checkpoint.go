package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// checkpoint is a saved disk of a sandbox, with its memory when asked (a fork), that new
// sandboxes can start from.
type checkpoint struct {
	// mu is held shared while a claim copies the checkpoint's disk and exclusively by delete,
	// so a checkpoint is never removed under a copy.
	mu   sync.RWMutex
	rec  checkpointRecord
	gone bool
}

func (ck *checkpoint) body() sandbox.Checkpoint {
	r := ck.rec
	return sandbox.Checkpoint{ID: r.ID, Name: r.Name, SandboxID: r.SandboxID, Key: r.Key, Tenant: r.Tenant, CreatedAt: r.CreatedAt.UTC(), Memory: r.Memory}
}

var checkpointNameRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._:/-]{0,62}$`)

// handleCheckpoint saves a sandbox's disk as a checkpoint while the sandbox keeps running. The
// header carries a root or tenant token (a checkpoint is a new resource); the body carries
// the sandbox's own token as proof of ownership, which only the root token may omit.
func (e *Engine) handleCheckpoint(w http.ResponseWriter, r *http.Request, c caller) error {
	var req sandbox.CheckpointRequest
	if err := decode(w, r, &req, bodyRequired); err != nil {
		return err
	}
	var forker runtime.Forker
	if req.Memory {
		var ok bool
		if forker, ok = e.rt.(runtime.Forker); !ok {
			return invalid("memory: the %s runtime cannot checkpoint a sandbox's memory (Info's checkpoint_memory is false)", e.rt.Name())
		}
	}
	b, err := e.checkpointed(r.PathValue("id"), req.Name, req.Token, c)
	if err != nil {
		return err
	}
	ck, err := e.takeCheckpoint(r.Context(), b, c, req.Name, forker, nil)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandbox.CheckpointResponse{Checkpoint: ck.body()})
	return nil
}

// checkpointed checks a checkpoint's name and returns the sandbox id it is of, which token (the
// sandbox's own) proves the caller holds; only the root token may omit it.
func (e *Engine) checkpointed(id, name, token string, c caller) (*box, error) {
	if name != "" && !checkpointNameRe.MatchString(name) {
		return nil, invalid("name: 1-63 letters, digits and . _ : / -, starting with a letter or digit; got %q", name)
	}
	asOperator := token == "" && c.root
	if token == "" && !asOperator {
		return nil, invalid("token: the sandbox's token is required")
	}
	return e.boxByToken(id, token, asOperator)
}

// takeCheckpoint saves b's disk, and its memory through forker when that is not nil; with
// since (an index stream) only what changed since that index, for an export against it.
func (e *Engine) takeCheckpoint(ctx context.Context, b *box, c caller, name string, forker runtime.Forker, since []byte) (*checkpoint, error) {
	differ, _ := e.rt.(runtime.DiffSnapshotter)
	if since != nil && differ == nil {
		return nil, invalid("the %s runtime cannot copy what changed of a disk", e.rt.Name())
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var done func()
	var err error
	if forker != nil {
		done, err = e.holdForMemory(b)
	} else {
		done, err = e.holdDisk(ctx, b, func() { cancel(errPreempted) })
	}
	if err != nil {
		return nil, err
	}
	defer done()
	r, _ := b.snapshot()
	id := newCheckpointID()
	dir := e.checkpointDir(id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create checkpoint: %w", err)
	}
	t0 := time.Now()
	if !r.Hibernated {
		defer b.freeze()() // the runtime pauses a running box for the copy
	}
	switch {
	case forker != nil:
		err = forker.SnapshotMemory(ctx, r.ID, dir)
		e.metrics.observe("snapshot_memory", time.Since(t0), err)
	case since != nil:
		err = differ.SnapshotSince(ctx, r.ID, dir, since)
		e.metrics.observe("snapshot_since", time.Since(t0), err)
	default:
		err = e.rt.Snapshot(ctx, r.ID, dir)
		e.metrics.observe("snapshot", time.Since(t0), err)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		if errors.Is(context.Cause(ctx), errPreempted) {
			return nil, newError(kindConflict, "the sandbox was hibernated or released during the checkpoint")
		}
		return nil, e.runtimeError(ctx, b, "checkpoint", err)
	}
	ck := &checkpoint{rec: checkpointRecord{
		ID: id, Name: name, SandboxID: r.ID, Key: r.Key, Tenant: c.tenant, CreatedAt: e.now(), Memory: forker != nil,
	}}
	if since != nil {
		ck.rec.Since = indexSum(since)
	}
	if err := writeJSONFile(e.checkpointMeta(id), ck.rec); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	e.mu.Lock()
	e.checkpoints[id] = ck
	e.mu.Unlock()
	e.metrics.count("checkpoints", "created")
	return ck, nil
}

// holdDisk holds b for a copy of its disk. A hibernated box stays asleep: its disk is copied
// with op held shared, so no wake, hibernate or release runs under the copy, and the caller
// (a snapshot right after a hibernate) does not undo the hibernate it follows. A box that is
// awake is held as any data-plane use holds it.
func (e *Engine) holdDisk(ctx context.Context, b *box, cancel func()) (done func(), err error) {
	b.gate.Lock()
	b.op.RLock()
	b.gate.Unlock()
	b.mu.Lock()
	gone, asleep := b.gone, b.rec.Hibernated
	b.mu.Unlock()
	switch {
	case gone:
		b.op.RUnlock()
		return nil, errUnknownSandbox
	case asleep:
		var once sync.Once
		return func() { once.Do(b.op.RUnlock) }, nil
	}
	b.op.RUnlock()
	return e.use(ctx, b, "checkpoint", cancel)
}

// holdForMemory holds b for a copy with its memory as a hibernate holds it: every relay and
// command of the box ends first (runsc cannot save a box holding host sockets; viewers and
// agent links connect again), and nothing wakes, hibernates or releases it under the copy.
func (e *Engine) holdForMemory(b *box) (done func(), err error) {
	unlock := b.lockLifecycle()
	b.mu.Lock()
	gone := b.gone
	b.mu.Unlock()
	if gone {
		unlock()
		return nil, errUnknownSandbox
	}
	return unlock, nil
}

// checkpointFor returns the checkpoint id if the caller may see it.
func (e *Engine) checkpointFor(id string, c caller) (*checkpoint, error) {
	if !validCheckpointID(id) {
		return nil, errUnknownCheckpoint
	}
	e.mu.Lock()
	ck := e.checkpoints[id]
	e.mu.Unlock()
	if ck == nil || !c.sees(ck.rec.Tenant) {
		return nil, errUnknownCheckpoint
	}
	return ck, nil
}

// handleClaimCheckpoint claims a new sandbox whose disk starts as the checkpoint's.
func (e *Engine) handleClaimCheckpoint(w http.ResponseWriter, r *http.Request, c caller) error {
	var req sandbox.CheckpointClaimRequest
	if err := decode(w, r, &req, bodyOptional); err != nil {
		return err
	}
	ttl, err := leaseTTL(req.TTLSeconds)
	if err != nil {
		return err
	}
	if len(req.ClaimRef) > maxClaimRef {
		return invalid("claim_ref: longer than %d bytes", maxClaimRef)
	}
	ck, err := e.checkpointFor(r.PathValue("id"), c)
	if err != nil {
		return err
	}
	b, err := e.claimFromCheckpoint(r.Context(), c, ck, ttl, req.ClaimRef)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e.claimResponse(b))
	return nil
}

func (e *Engine) claimFromCheckpoint(ctx context.Context, c caller, ck *checkpoint, ttl time.Duration, claimRef string) (*box, error) {
	start := time.Now()
	ck.mu.RLock()
	defer ck.mu.RUnlock()
	if ck.gone {
		return nil, errUnknownCheckpoint
	}
	if ck.rec.Since != "" {
		return nil, newError(kindConflict, "checkpoint %s holds only what changed since an earlier export: it can be exported against that export's index, not claimed", ck.rec.ID)
	}
	rootfs, err := e.rootfs(ck.rec.Key.Template)
	var ae *apiError
	if errors.As(err, &ae) && ae.kind == kindInvalid {
		return nil, newError(kindConflict, "the checkpoint's template %q is no longer available", ck.rec.Key.Template)
	}
	if err != nil {
		return nil, err
	}
	b, err := e.reserve(ck.rec.Key)
	if err != nil {
		return nil, err
	}
	r, _ := b.snapshot()
	if err := e.seed(ctx, e.spec(r, rootfs), e.checkpointDir(ck.rec.ID)); err != nil {
		e.discard(ctx, b)
		return nil, err
	}
	if ck.rec.Memory {
		err = e.restore(ctx, b, rootfs, e.checkpointDir(ck.rec.ID))
	} else {
		err = e.start(ctx, b, rootfs)
	}
	if err != nil {
		return nil, err
	}
	if err := e.finishClaim(b, c, ttl, claimRef, ck.rec.ID); err != nil {
		e.discard(ctx, b)
		return nil, err
	}
	e.metrics.claimed("checkpoint", time.Since(start))
	return b, nil
}

// seed makes the directory of the box spec describes (replacing whatever is there) with a disk
// holding the files of the checkpoint directory src. The disk was written by a box, so it is
// copied by the runtime's confined walker, which never follows a symlink in it (see
// runtime.Runtime.Seed), not by cp -a.
func (e *Engine) seed(ctx context.Context, spec runtime.Spec, src string) error {
	if err := os.RemoveAll(spec.Dir); err != nil {
		return fmt.Errorf("copy checkpoint: %w", err)
	}
	err := e.rt.Seed(ctx, spec, src)
	if errors.Is(err, runtime.ErrDiskFull) {
		return &apiError{kind: kindTooLarge, msg: fmt.Sprintf("the checkpoint's files do not fit in the sandbox's disk of %d MiB; claim a larger size", spec.DiskMB), err: err}
	}
	if err != nil {
		return fmt.Errorf("copy checkpoint: %w", err)
	}
	return nil
}

// handleListCheckpoints lists the caller's checkpoints, newest first.
func (e *Engine) handleListCheckpoints(w http.ResponseWriter, _ *http.Request, c caller) error {
	e.mu.Lock()
	out := []sandbox.Checkpoint{}
	for _, ck := range e.checkpoints {
		if c.sees(ck.rec.Tenant) {
			out = append(out, ck.body())
		}
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b sandbox.Checkpoint) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	writeJSON(w, http.StatusOK, sandbox.CheckpointList{Checkpoints: out})
	return nil
}

// handleDeleteCheckpoint removes a checkpoint; 404 when it is gone (or not the caller's).
func (e *Engine) handleDeleteCheckpoint(w http.ResponseWriter, r *http.Request, c caller) error {
	ck, err := e.checkpointFor(r.PathValue("id"), c)
	if err != nil {
		return err
	}
	ck.mu.Lock()
	defer ck.mu.Unlock()
	if ck.gone {
		return errUnknownCheckpoint
	}
	// The metadata goes first: without it a checkpoint does not exist, and the next start
	// removes a directory left behind.
	if err := os.Remove(e.checkpointMeta(ck.rec.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete checkpoint: %w", err)
	}
	ck.gone = true
	e.mu.Lock()
	delete(e.checkpoints, ck.rec.ID)
	e.mu.Unlock()
	if err := os.RemoveAll(e.checkpointDir(ck.rec.ID)); err != nil {
		e.log.Error("remove checkpoint directory", "id", ck.rec.ID, "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
