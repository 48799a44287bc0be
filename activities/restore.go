package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// RestoreSnapshotInput asks for a new sandbox for the box whose disk is a snapshot. Attempt is
// the box's claim attempt, so a retried activity finds what its lost try made.
type RestoreSnapshotInput struct {
	BoxID      cocoonbox.BoxID
	SnapshotID string // "" is the box's newest complete snapshot
	Size       cocoonbox.Size
	Attempt    int
	TTL        time.Duration
	Network    cocoonbox.Network // the box's egress policy; zero is none
	// Node is the registered node PlaceRestore chose, whose own worker runs this restore so the
	// object streams from S3 into the engine beside it; "" (or a node no longer placeable)
	// places the box here.
	Node string
	// Reseed gives the restored box an identity of its own (cocoonbox-init reseed, its hostname
	// from Name): a fork restored from its parent's disk, which has its parent's.
	Reseed bool   `json:",omitempty"`
	Name   string `json:",omitempty"`
}

// PlaceRestoreInput asks where a restored box of this size and network goes.
type PlaceRestoreInput struct {
	Size    cocoonbox.Size
	Network cocoonbox.Network
}

// PlaceRestoreResult names the node a restore goes to; "" when no node is registered or none
// has room by its heartbeat (the restoring worker's own engine then decides).
type PlaceRestoreResult struct {
	Node string
}

// PlaceRestore picks the node a restore goes to, by the rule a claim follows, before the restore
// is sent to that node's queue. It only reads: the restore counts the placement when it claims.
func (a *Snapshots) PlaceRestore(ctx context.Context, in PlaceRestoreInput) (PlaceRestoreResult, error) {
	registered, err := a.registered(ctx)
	if err != nil || len(registered) == 0 {
		return PlaceRestoreResult{}, err
	}
	req := nodes.Request{Template: a.template(), Size: orDefaultSize(in.Size), Net: lane(in.Network)}
	n, refused := placement(registered, req, a.NodeDeadAfter, a.Node)
	if refused != nil {
		return PlaceRestoreResult{}, classify(fmt.Errorf("place the restored box: %w", refused))
	}
	return PlaceRestoreResult{Node: n.ID}, nil
}

// RestoreSnapshotResult is the new sandbox, answering, whose token went to the TokenStore, and
// the snapshot it was built from.
type RestoreSnapshotResult struct {
	SnapshotID string
	TakenAt    time.Time // when the snapshot was taken
	SandboxID  string
	Deadline   time.Time
	Node       string // the registered node that holds the sandbox; "" when none is named
}

// RestoreSnapshot streams a complete snapshot from object storage into the engine, checking its
// sha256 on the way, straight into a sandbox claimed for it where the engine can (Info's
// ImportClaim), else as a checkpoint it claims a sandbox from, and waits until it answers. The box's current sandbox is not touched (the workflow releases it after the swap), so
// a failed restore leaves the box as it was. A box with no snapshot is NotFound; a snapshot whose
// bytes no longer match their checksum is SnapshotCorrupt, naming it.
func (a *Snapshots) RestoreSnapshot(ctx context.Context, in RestoreSnapshotInput) (RestoreSnapshotResult, error) {
	if err := in.BoxID.Validate(); err != nil {
		return RestoreSnapshotResult{}, classify(err)
	}
	if in.Attempt < 1 {
		return RestoreSnapshotResult{}, classify(cocoonbox.Invalid("attempt", "must be at least 1"))
	}
	snap, err := a.restorable(ctx, in.BoxID, in.SnapshotID)
	if err != nil {
		return RestoreSnapshotResult{}, err // NotFound first: a box with no snapshot needs no porter
	}
	if snap.Kind == cocoonbox.SnapshotKindState {
		return a.restoreState(ctx, in, snap)
	}
	size := orDefaultSize(in.Size)
	name := snap.ID + "." + strconv.Itoa(in.Attempt)
	ref := ClaimRef(in.BoxID, in.Attempt)
	key := sandbox.PoolKey{Template: a.template(), Net: lane(in.Network), Size: string(size)}

	// A retry first looks, on every engine, for what its lost try made (placement may have
	// changed its mind since): the imported checkpoint, and a sandbox already claimed from it;
	// or, once that try finished and dropped its checkpoint, the sandbox by its claim_ref (an
	// engine that ignores claim_ref on a checkpoint claim makes this find nothing, as before).
	registered, err := a.registered(ctx)
	if err != nil {
		return RestoreSnapshotResult{}, err
	}
	engines := a.engines(registered)
	var eng nodeEngine
	var ck sandbox.Checkpoint
	for _, e := range engines {
		found, ok, err := checkpointNamed(ctx, e, name)
		if err != nil {
			return RestoreSnapshotResult{}, err
		}
		if ok {
			got, ok, err := adoptFrom(ctx, e, found.ID)
			if err != nil {
				return RestoreSnapshotResult{}, err
			}
			if ok {
				return a.settle(ctx, e, in, snap, found.ID, got)
			}
			eng, ck = e, found
			break
		}
		got, ok, err := adoptByRef(ctx, e, ref)
		if err != nil {
			return RestoreSnapshotResult{}, err
		}
		if ok {
			return a.settle(ctx, e, in, snap, "", got)
		}
	}
	if ck.ID == "" {
		if eng, err = a.placeRestore(registered, in.Node, nodes.Request{Template: key.Template, Size: size, Net: key.Net}); err != nil {
			return RestoreSnapshotResult{}, err
		}
		porter, caps, err := porterOf(ctx, eng)
		if err != nil {
			return RestoreSnapshotResult{}, err
		}
		if caps.importClaim {
			// Straight into the new sandbox's disk: no checkpoint for the claim to copy whole.
			got, err := a.importClaim(ctx, porter, snap, key, in.TTL, ref)
			if err != nil {
				return RestoreSnapshotResult{}, err
			}
			return a.placed(ctx, eng, in, snap, "", got)
		}
		if ck, err = a.importSnapshot(ctx, porter, snap, key, name); err != nil {
			return RestoreSnapshotResult{}, err
		}
	}
	got, err := whileHeartbeating(ctx, func(ctx context.Context) (sandbox.Claimed, error) {
		return eng.ClaimFromCheckpoint(ctx, ck.ID, in.TTL, ref)
	})
	if err != nil {
		return RestoreSnapshotResult{}, classify(fmt.Errorf("claim from snapshot %s: %w", snap.ID, err))
	}
	return a.placed(ctx, eng, in, snap, ck.ID, got)
}

// placed counts the sandbox claimed on eng for in as placed there, gives it the box's egress
// policy (released when that fails: a box never runs on a wider one) and settles it.
func (a *Snapshots) placed(ctx context.Context, eng nodeEngine, in RestoreSnapshotInput, snap cocoonbox.Snapshot, ckID string, got sandbox.Claimed) (RestoreSnapshotResult, error) {
	notePlaced(ctx, a.Placed, eng.node, orDefaultSize(in.Size))
	if err := applyEgress(ctx, eng.Client, got.SandboxRef, in.Network); err != nil {
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = eng.Release(relCtx, got.SandboxRef) // a box never runs on a wider policy than its own
		return RestoreSnapshotResult{}, classify(fmt.Errorf("restore snapshot %s: %w", snap.ID, err))
	}
	return a.settle(ctx, eng, in, snap, ckID, got)
}

// settle waits until the sandbox restored on eng answers (and is reseeded when in says so) and
// only then records its token as the box's: until that moment the box's current sandbox keeps
// its own token, so a restore that fails leaves the box fully usable. A sandbox that never
// answers is released.
func (a *Snapshots) settle(ctx context.Context, eng nodeEngine, in RestoreSnapshotInput, snap cocoonbox.Snapshot, ckID string, got sandbox.Claimed) (RestoreSnapshotResult, error) {
	snapID, boxID := snap.ID, in.BoxID
	readyCtx, cancel := context.WithTimeout(ctx, restoreReadyTimeout)
	err := readyWithCredential(readyCtx, eng.Client, got.SandboxRef, a.PollInterval, boxID, a.Credentials)
	if err == nil && in.Reseed {
		err = reseed(readyCtx, eng.Client, got.SandboxRef, Hostname(in.Name, boxID))
	}
	cancel()
	if err != nil {
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = eng.Release(relCtx, got.SandboxRef)
		dropCheckpoint(ctx, eng, ckID)
		return RestoreSnapshotResult{}, classify(fmt.Errorf("restore snapshot %s: the new sandbox did not answer: %w", snapID, err))
	}
	got = onNode(got, eng.node, eng.url)
	if err := a.Tokens.PutSandboxToken(ctx, string(boxID), got.SandboxRef); err != nil {
		return RestoreSnapshotResult{}, classify(fmt.Errorf("store sandbox token: %w", err))
	}
	if ckID != "" {
		dropCheckpoint(ctx, eng, ckID) // the sandbox has its own copy of the disk
	}
	return RestoreSnapshotResult{SnapshotID: snapID, TakenAt: snap.CreatedAt, SandboxID: got.ID, Deadline: got.Deadline, Node: got.Node}, nil
}

// restoreReadyTimeout bounds how long a restored sandbox may take to answer.
const restoreReadyTimeout = 3 * time.Minute

// restorable finds the snapshot to restore and checks that it can be.
func (a *Snapshots) restorable(ctx context.Context, boxID cocoonbox.BoxID, id string) (cocoonbox.Snapshot, error) {
	var snap cocoonbox.Snapshot
	var err error
	if id == "" {
		snap, err = a.Store.LatestSnapshot(ctx, boxID)
	} else {
		if err := cocoonbox.ValidateSnapshotID("snapshot_id", id); err != nil {
			return snap, classify(err)
		}
		snap, err = a.Store.SnapshotByID(ctx, id)
	}
	switch {
	case cocoonbox.ErrorCode(err) == cocoonbox.ENotFound && id == "":
		return snap, newError(ErrTypeNotFound, fmt.Errorf("box %s has no complete snapshot", boxID))
	case cocoonbox.ErrorCode(err) == cocoonbox.ENotFound:
		return snap, newError(ErrTypeNotFound, fmt.Errorf("snapshot %s does not exist", id))
	case err != nil:
		return snap, classify(fmt.Errorf("read snapshot: %w", err))
	case snap.BoxID != boxID:
		// Said as not found: a caller learns nothing about other boxes' snapshots.
		return snap, newError(ErrTypeNotFound, fmt.Errorf("snapshot %s does not exist", id))
	case snap.State != cocoonbox.SnapshotComplete:
		return snap, newError(ErrTypeConflict, fmt.Errorf("snapshot %s is %s, not complete", snap.ID, snap.State))
	}
	return snap, nil
}

// importSnapshot streams the snapshot's chain into the engine as checkpoint name (sendChain).
func (a *Snapshots) importSnapshot(ctx context.Context, porter sandbox.DiskPorter, snap cocoonbox.Snapshot, key sandbox.PoolKey, name string) (sandbox.Checkpoint, error) {
	var ck sandbox.Checkpoint
	err := a.sendChain(ctx, snap, func(ctx context.Context, r io.Reader, layers []sandbox.DiskExport) (err error) {
		ck, err = porter.ImportCheckpointDisk(ctx, r, layers, key, name)
		return err
	})
	return ck, err
}

// importClaim streams the snapshot's chain into a sandbox of key the engine claims for it under
// ref, unpacked straight into its disk (sendChain, DiskPorter.ImportClaim).
func (a *Snapshots) importClaim(ctx context.Context, porter sandbox.DiskPorter, snap cocoonbox.Snapshot, key sandbox.PoolKey, ttl time.Duration, ref string) (sandbox.Claimed, error) {
	var got sandbox.Claimed
	err := a.sendChain(ctx, snap, func(ctx context.Context, r io.Reader, layers []sandbox.DiskExport) (err error) {
		got, err = porter.ImportClaim(ctx, r, layers, key, ttl, ref)
		return err
	})
	return got, err
}

// sendChain streams the snapshot's chain (its full base, the incremental snapshots on it, then
// its own object) to send, hashing each object on the way so a corrupted one is named as such.
func (a *Snapshots) sendChain(ctx context.Context, snap cocoonbox.Snapshot, send func(context.Context, io.Reader, []sandbox.DiskExport) error) error {
	chain := []cocoonbox.Snapshot{snap}
	if snap.BaseID != "" {
		var err error
		if chain, err = a.Store.SnapshotChain(ctx, snap.ID); err != nil {
			return classify(fmt.Errorf("restore snapshot %s: %w", snap.ID, err))
		}
	}
	layers := make([]sandbox.DiskExport, len(chain))
	for i, s := range chain {
		if s.State != cocoonbox.SnapshotComplete {
			return newError(ErrTypeConflict, fmt.Errorf("snapshot %s needs %s, which is %s", snap.ID, s.ID, s.State))
		}
		info, err := a.Blobs.Stat(ctx, s.ObjectKey)
		if err != nil {
			return classify(fmt.Errorf("restore snapshot %s: %w", snap.ID, err))
		}
		if info.Size != s.Bytes {
			return corruptLayer(snap, s, "its object %s holds %d bytes, %d were stored", s.ObjectKey, info.Size, s.Bytes)
		}
		layers[i] = sandbox.DiskExport{SHA256: s.SHA256, Bytes: s.Bytes}
	}
	var read atomic.Int64
	lr := &layerReader{ctx: ctx, blobs: a.Blobs, chain: chain, read: &read}
	defer lr.close()
	details := func() any { return uploadProgress{Phase: "import", Bytes: read.Load()} }
	_, err := withHeartbeats(ctx, details, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, send(ctx, lr, layers)
	})
	if err == nil {
		return nil
	}
	// Our own hashes decide for the objects read whole; the engine's refusal of a checksum
	// otherwise (it reads each layer to its end before it checks).
	for i, hr := range lr.hashes {
		s := chain[i]
		if errors.Is(hr.err, objstore.ErrCorrupt) {
			return corruptLayer(snap, s, "its object %s fails the checksum stored with it", s.ObjectKey)
		}
		if hr.eof {
			if got := hex.EncodeToString(hr.h.Sum(nil)); got != s.SHA256 {
				return corruptLayer(snap, s, "its object %s has sha256 %s, %s was stored", s.ObjectKey, got, s.SHA256)
			}
		}
	}
	if lr.err != nil {
		return classify(fmt.Errorf("restore snapshot %s: %w", snap.ID, lr.err))
	}
	if errors.Is(err, sandbox.ErrInvalid) {
		return corruptLayer(snap, snap, "the engine refused its stream: %v", err)
	}
	return classify(fmt.Errorf("restore snapshot %s: %w", snap.ID, err))
}

// corruptLayer is the SnapshotCorrupt error of snapshot snap whose layer (itself or a base under
// it) is at fault.
func corruptLayer(snap, layer cocoonbox.Snapshot, format string, args ...any) error {
	what := fmt.Sprintf("snapshot %s of box %s is corrupt: ", snap.ID, snap.BoxID)
	if layer.ID != snap.ID {
		what += fmt.Sprintf("the snapshot %s it is built on: ", layer.ID)
	}
	return newError(ErrTypeSnapshotCorrupt, fmt.Errorf(what+format, args...))
}

// layerReader reads the objects of a chain one after the other, opening each only when the one
// before it ends, and hashes each on its own.
type layerReader struct {
	ctx    context.Context
	blobs  objstore.Store
	chain  []cocoonbox.Snapshot
	read   *atomic.Int64
	cur    io.ReadCloser
	hashes []*hashingReader // one per object opened
	err    error            // the error opening an object
}

func (l *layerReader) Read(p []byte) (int, error) {
	for {
		if l.cur == nil {
			i := len(l.hashes)
			if i == len(l.chain) {
				return 0, io.EOF
			}
			rc, err := l.blobs.Get(l.ctx, l.chain[i].ObjectKey)
			if err != nil {
				l.err = err
				return 0, err
			}
			l.cur = rc
			l.hashes = append(l.hashes, &hashingReader{r: rc, h: sha256.New(), n: l.read})
		}
		n, err := l.hashes[len(l.hashes)-1].Read(p)
		if err == io.EOF {
			_ = l.cur.Close()
			l.cur = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

func (l *layerReader) close() {
	if l.cur != nil {
		_ = l.cur.Close()
	}
}

// checkpointNamed finds eng's checkpoint with name.
func checkpointNamed(ctx context.Context, eng nodeEngine, name string) (sandbox.Checkpoint, bool, error) {
	cks, err := eng.ListCheckpoints(ctx)
	if err != nil {
		return sandbox.Checkpoint{}, false, classify(fmt.Errorf("list checkpoints%s: %w", eng.on(), err))
	}
	for _, ck := range cks {
		if ck.Name == name {
			return ck, true, nil
		}
	}
	return sandbox.Checkpoint{}, false, nil
}

// adoptFrom finds a sandbox already claimed from eng's checkpoint ckID (by a try whose answer was
// lost) and fetches its token, which takes the engine's root token.
func adoptFrom(ctx context.Context, eng nodeEngine, ckID string) (sandbox.Claimed, bool, error) {
	return adoptWhere(ctx, eng, "", func(r sandbox.Sandbox) bool { return r.FromCheckpoint == ckID })
}

// adoptByRef finds the sandbox claimed on eng under ref (a restore's try whose answer was lost).
func adoptByRef(ctx context.Context, eng nodeEngine, ref string) (sandbox.Claimed, bool, error) {
	// An engine that does not filter by claim_ref lists them all.
	return adoptWhere(ctx, eng, ref, func(r sandbox.Sandbox) bool { return r.ClaimRef == ref })
}

// adoptWhere returns the first sandbox of eng listed under ref ("": all) that mine says a lost
// try of this restore made, with its token.
func adoptWhere(ctx context.Context, eng nodeEngine, ref string, mine func(sandbox.Sandbox) bool) (sandbox.Claimed, bool, error) {
	rows, err := eng.List(ctx, ref)
	if err != nil {
		return sandbox.Claimed{}, false, classify(fmt.Errorf("list sandboxes%s: %w", eng.on(), err))
	}
	for _, r := range rows {
		if !mine(r) {
			continue
		}
		full, err := eng.Get(ctx, r.ID)
		if err != nil {
			return sandbox.Claimed{}, false, classify(fmt.Errorf("adopt sandbox %s: %w", r.ID, err))
		}
		return sandbox.Claimed{SandboxRef: sandbox.SandboxRef{ID: full.ID, Token: full.Token},
			Deadline: full.Deadline, Adopted: true}, true, nil
	}
	return sandbox.Claimed{}, false, nil
}

func (a *Snapshots) template() string {
	if a.Template == "" {
		return "base"
	}
	return a.Template
}

// hashingReader hashes and counts what passes through it and notes the end of the stream.
type hashingReader struct {
	r   io.Reader
	h   hash.Hash
	n   *atomic.Int64
	eof bool
	err error // the first read error other than EOF
}

func (r *hashingReader) Read(p []byte) (int, error) {
	k, err := r.r.Read(p)
	r.h.Write(p[:k])
	r.n.Add(int64(k))
	switch {
	case err == io.EOF:
		r.eof = true
	case err != nil && r.err == nil:
		r.err = err
	}
	return k, err
}
