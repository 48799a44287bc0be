package activities

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/snapshot"
)

// SnapshotStore is the part of the database the snapshot activities write: one row per snapshot,
// which is what the API lists and retention ranks. Errors carry cocoonbox codes (ENotFound,
// EConflict, EInvalid).
type SnapshotStore interface {
	// BeginSnapshot records s (ID, BoxID, ParentID, ObjectKey) as uploading; the same snapshot
	// begun again is returned as it is.
	BeginSnapshot(ctx context.Context, s cocoonbox.Snapshot) (cocoonbox.Snapshot, error)
	// CompleteSnapshot records the verified figures and makes the snapshot usable.
	CompleteSnapshot(ctx context.Context, id string, bytes int64, sha256 string, files int64) (cocoonbox.Snapshot, error)
	// FailSnapshot marks an unfinished snapshot failed; a complete one is EConflict.
	FailSnapshot(ctx context.Context, id string) error
	SnapshotByID(ctx context.Context, id string) (cocoonbox.Snapshot, error)
	// LatestSnapshot is the box's newest complete snapshot, ENotFound when it has none.
	LatestSnapshot(ctx context.Context, boxID cocoonbox.BoxID) (cocoonbox.Snapshot, error)
	// ListSnapshots returns every snapshot row of the box, newest first.
	ListSnapshots(ctx context.Context, boxID cocoonbox.BoxID) ([]cocoonbox.Snapshot, error)
	// SnapshotsToPrune returns what retention removes: failed rows, and complete unpinned ones
	// older than the newest keep (at least 1) complete ones.
	SnapshotsToPrune(ctx context.Context, boxID cocoonbox.BoxID, keep int) ([]cocoonbox.Snapshot, error)
	// DeleteSnapshot removes a row; a snapshot that is another's base is EConflict.
	DeleteSnapshot(ctx context.Context, id string) error
	// SnapshotChain is what restoring id takes, oldest first: its full base, the incremental
	// snapshots on it, id last.
	SnapshotChain(ctx context.Context, id string) ([]cocoonbox.Snapshot, error)
	// MakeSnapshotFull drops the base of an uploading snapshot that could not be incremental.
	MakeSnapshotFull(ctx context.Context, id string) error
	// MakeSnapshotState records that an uploading snapshot is taken through the box's agent.
	MakeSnapshotState(ctx context.Context, id string) error
	// CompactSnapshot records that a complete snapshot now lives whole in objectKey.
	CompactSnapshot(ctx context.Context, id, objectKey string, bytes int64, sha256 string, files int64) (cocoonbox.Snapshot, error)
}

// Snapshots holds the activities that move a box's disk between the engine and object storage.
// Snapshot bytes flow engine → worker → S3 (and back) as streams; only IDs, sizes and checksums
// ever reach a workflow.
type Snapshots struct {
	Client sandbox.Client // must also be a sandbox.DiskPorter (the local engine is)
	Tokens TokenStore
	Blobs  objstore.Store
	Store  SnapshotStore
	// Template is the template a restored box's pool key names, as for a claim (see Sandbox);
	// its lane is the box's network policy's.
	Template string
	// PollInterval is how often a restored sandbox is probed until it answers; 0 is half a second.
	PollInterval time.Duration
	// Credentials derives a box's agent credential, written into a restored sandbox once it
	// answers (as Sandbox.WaitReady does for a claim); nil skips it.
	Credentials func(boxID cocoonbox.BoxID) (string, error)
	// UploadRate caps the upload in bytes per second, so a snapshot does not starve the node's
	// uplink; 0 is no cap.
	UploadRate int64
	// Link reaches boxes' agents, whose State service snapshots a box when the engine cannot
	// export its disk (upstream sandboxd); nil leaves such an engine's boxes unsnapshotted.
	Link *boxlink.Link
	// StatePaths are the trees of the box such a snapshot holds; empty is DefaultStatePaths.
	StatePaths []string
	// Node is the registered node whose engine Client's own is (see Sandbox.Node): a box
	// restored there is recorded as on it.
	Node string
	// Nodes lists the deployment's engine nodes, as for Sandbox: with nodes, a restored box is
	// placed by the rule a claim follows, and its snapshot imported on the node placed.
	Nodes func(ctx context.Context) ([]nodes.Node, error)
	// NodeDeadAfter is Sandbox.NodeDeadAfter.
	NodeDeadAfter time.Duration
	// Placed is Sandbox.Placed, for restored boxes.
	Placed func(ctx context.Context, node string, mib int64) error
}

// SnapshotObjectKey is where a snapshot's stream lives in the bucket; its manifest sits beside it
// under SnapshotManifestKey.
func SnapshotObjectKey(boxID cocoonbox.BoxID, snapshotID string) string {
	return "boxes/" + string(boxID) + "/snapshots/" + snapshotID + ".tar.zst"
}

// SnapshotManifestKey is where a snapshot's manifest (JSON) lives in the bucket.
func SnapshotManifestKey(boxID cocoonbox.BoxID, snapshotID string) string {
	return "boxes/" + string(boxID) + "/snapshots/" + snapshotID + ".json"
}

// SnapshotIndexKey is where the index of a snapshot's tree lives: the base the next incremental
// snapshot of the box is exported against.
func SnapshotIndexKey(boxID cocoonbox.BoxID, snapshotID string) string {
	return "boxes/" + string(boxID) + "/snapshots/" + snapshotID + ".index.zst"
}

// SnapshotFullKey is where an incremental snapshot's stream lives once retention compacted it
// into a full one.
func SnapshotFullKey(boxID cocoonbox.BoxID, snapshotID string) string {
	return "boxes/" + string(boxID) + "/snapshots/" + snapshotID + ".full.tar.zst"
}

// maxChainDepth bounds how many incremental snapshots stack on one full one: the next is full,
// so a restore never reads more than this many layers.
const maxChainDepth = 32

// maxIndexBytes bounds a base index read from the bucket (compressed).
const maxIndexBytes = 256 << 20

// BeginSnapshotInput names the snapshot to start; the workflow chose its ID.
type BeginSnapshotInput struct {
	BoxID      cocoonbox.BoxID
	SnapshotID string
}

// UploadSnapshotInput names the snapshot and the sandbox whose disk it captures.
type UploadSnapshotInput struct {
	BoxID      cocoonbox.BoxID
	SnapshotID string
	SandboxID  string
}

// UploadSnapshotResult is what was stored and verified.
type UploadSnapshotResult struct {
	Bytes  int64
	SHA256 string
	Files  int64
}

// CompleteSnapshotInput records a verified upload.
type CompleteSnapshotInput struct {
	SnapshotID string
	UploadSnapshotResult
}

// SnapshotRef names one snapshot of a box.
type SnapshotRef struct {
	BoxID      cocoonbox.BoxID
	SnapshotID string
}

// PruneSnapshotsInput says what to remove: the snapshots retention gives up (Keep newest, at
// least 1, plus pinned), or with All every snapshot of a box being purged.
type PruneSnapshotsInput struct {
	BoxID cocoonbox.BoxID
	Keep  int
	All   bool
}

// PruneSnapshotsResult lists the snapshots whose objects and rows are gone.
type PruneSnapshotsResult struct {
	Deleted []string
}

// uploadProgress is the heartbeat detail of UploadSnapshot and the read side of RestoreSnapshot.
type uploadProgress struct {
	Phase string // "upload", "verify" or "import"
	Bytes int64
}

// BeginSnapshot records the snapshot as uploading, with the box's newest complete snapshot as its
// parent, and as its base too when that one has an index and its chain is not too long: the
// snapshot is then incremental. A retry finds its own row and returns it.
func (a *Snapshots) BeginSnapshot(ctx context.Context, in BeginSnapshotInput) (cocoonbox.Snapshot, error) {
	if err := validateSnapshotRef(in.BoxID, in.SnapshotID); err != nil {
		return cocoonbox.Snapshot{}, err
	}
	if s, err := a.Store.SnapshotByID(ctx, in.SnapshotID); err == nil {
		if s.BoxID != in.BoxID {
			return cocoonbox.Snapshot{}, classify(&cocoonbox.Error{Code: cocoonbox.EConflict,
				Message: fmt.Sprintf("snapshot %s belongs to box %s", in.SnapshotID, s.BoxID)})
		}
		return s, nil
	} else if cocoonbox.ErrorCode(err) != cocoonbox.ENotFound {
		return cocoonbox.Snapshot{}, classify(fmt.Errorf("read snapshot %s: %w", in.SnapshotID, err))
	}
	parent, base := "", ""
	switch latest, err := a.Store.LatestSnapshot(ctx, in.BoxID); {
	case err == nil:
		parent = latest.ID
		if latest.Kind != cocoonbox.SnapshotKindState && latest.IndexKey != "" && latest.Depth+1 < maxChainDepth {
			base = latest.ID
		}
	case cocoonbox.ErrorCode(err) != cocoonbox.ENotFound:
		return cocoonbox.Snapshot{}, classify(fmt.Errorf("read latest snapshot of box %s: %w", in.BoxID, err))
	}
	s, err := a.Store.BeginSnapshot(ctx, cocoonbox.Snapshot{
		ID: in.SnapshotID, BoxID: in.BoxID, ParentID: parent, BaseID: base,
		ObjectKey: SnapshotObjectKey(in.BoxID, in.SnapshotID), IndexKey: SnapshotIndexKey(in.BoxID, in.SnapshotID),
	})
	if err != nil {
		return cocoonbox.Snapshot{}, classify(fmt.Errorf("begin snapshot %s: %w", in.SnapshotID, err))
	}
	return s, nil
}

// UploadSnapshot checkpoints the sandbox (a copy taken while the box keeps running, so the disk
// is coherent without pausing anyone), streams the checkpoint's disk from the engine straight
// into a multipart upload, reads the object back to verify its sha256, and writes the index of
// the tree and the manifest beside it. A snapshot with a base is exported against the base's
// index, so it holds only what changed; when that cannot be (the index is gone, the engine
// cannot) it becomes a full one. It starts clean every time: a killed attempt's multipart upload
// is aborted and its checkpoint deleted first, so a retried snapshot is uploaded exactly once.
func (a *Snapshots) UploadSnapshot(ctx context.Context, in UploadSnapshotInput) (UploadSnapshotResult, error) {
	if err := validateSnapshotRef(in.BoxID, in.SnapshotID); err != nil {
		return UploadSnapshotResult{}, err
	}
	row, err := a.Store.SnapshotByID(ctx, in.SnapshotID)
	if err != nil {
		return UploadSnapshotResult{}, classify(fmt.Errorf("read snapshot %s: %w", in.SnapshotID, err))
	}
	ref, err := sandboxRef(ctx, a.Tokens, in.BoxID, in.SandboxID)
	if err != nil {
		return UploadSnapshotResult{}, err
	}
	// The checkpoint is made, exported and dropped on the engine that holds the box.
	eng := nodeEngine{Client: engineAt(a.Client, ref.Addr), node: ref.Node, url: ref.Addr}
	porter, caps, err := porterOf(ctx, eng)
	if errors.Is(err, errNoDiskExport) {
		// Upstream sandboxd: the box's agent reads its trees instead.
		return a.uploadState(ctx, row, ref)
	}
	if err != nil {
		return UploadSnapshotResult{}, err
	}
	baseIndex, err := a.baseIndex(ctx, row, caps.incremental)
	if err != nil {
		return UploadSnapshotResult{}, err
	}
	key := SnapshotObjectKey(in.BoxID, in.SnapshotID)
	if _, err := a.Blobs.AbortIncomplete(ctx, key, 0); err != nil {
		return UploadSnapshotResult{}, classify(fmt.Errorf("abort earlier uploads of %s: %w", key, err))
	}
	if err := deleteCheckpoints(ctx, eng, in.SnapshotID); err != nil {
		return UploadSnapshotResult{}, err
	}
	t0 := time.Now()
	ck, err := whileHeartbeating(ctx, func(ctx context.Context) (sandbox.Checkpoint, error) {
		if baseIndex == nil || !caps.since {
			return eng.Checkpoint(ctx, ref, in.SnapshotID)
		}
		// Only what changed since the base is copied, so the box pauses for that.
		ck, err := porter.CheckpointSince(ctx, ref, in.SnapshotID, bytes.NewReader(baseIndex))
		if !errors.Is(err, sandbox.ErrInvalid) {
			return ck, err
		}
		// The engine refused the base index: this snapshot is taken full.
		logger(ctx).Warn("snapshot taken full", "snapshot", in.SnapshotID, "base", row.BaseID, "reason", err.Error())
		if ferr := a.Store.MakeSnapshotFull(ctx, row.ID); ferr != nil {
			return sandbox.Checkpoint{}, ferr
		}
		baseIndex = nil
		return eng.Checkpoint(ctx, ref, in.SnapshotID)
	})
	if errors.Is(err, sandbox.ErrNotFound) {
		return UploadSnapshotResult{}, gone(fmt.Errorf("checkpoint sandbox %s: %w", in.SandboxID, err))
	}
	if err != nil {
		return UploadSnapshotResult{}, classify(fmt.Errorf("checkpoint sandbox %s: %w", in.SandboxID, err))
	}
	defer dropCheckpoint(ctx, eng, ck.ID)
	logger(ctx).Info("snapshot checkpointed", "snapshot", in.SnapshotID, "checkpoint", time.Since(t0).Round(time.Millisecond))
	return a.storeDisk(ctx, porter, row, ck.ID, ck.CreatedAt, baseIndex)
}

// storeDisk streams the disk of checkpoint ckID from porter into the object of snapshot row
// (against baseIndex when it is not nil: only what changed), verifies it, and writes the index
// of the tree and the manifest (created: when the disk was taken) beside it, heartbeating its
// progress.
func (a *Snapshots) storeDisk(ctx context.Context, porter sandbox.DiskPorter, row cocoonbox.Snapshot, ckID string,
	created time.Time, baseIndex []byte) (UploadSnapshotResult, error) {
	key := SnapshotObjectKey(row.BoxID, row.ID)
	var progress atomic.Int64
	phase := atomic.Pointer[string]{}
	setPhase := func(p string) { phase.Store(&p) }
	setPhase("upload")
	details := func() any { return uploadProgress{Phase: *phase.Load(), Bytes: progress.Load()} }
	return withHeartbeats(ctx, details, func(ctx context.Context) (UploadSnapshotResult, error) {
		t1 := time.Now()
		ex, err := a.upload(ctx, porter, ckID, baseIndex, key, &progress)
		if err != nil && baseIndex != nil && errors.Is(err, sandbox.ErrInvalid) {
			// The engine refused the base index: the next attempt is a full snapshot.
			if ferr := a.Store.MakeSnapshotFull(ctx, row.ID); ferr != nil {
				return UploadSnapshotResult{}, classify(ferr)
			}
		}
		if err != nil {
			return UploadSnapshotResult{}, err
		}
		t2 := time.Now()
		setPhase("verify")
		progress.Store(0)
		if err := a.verify(ctx, key, ex, &progress); err != nil {
			return UploadSnapshotResult{}, err
		}
		if row.IndexKey != "" {
			var idx bytes.Buffer
			if _, err := porter.CheckpointDiskIndex(ctx, ckID, &idx); err != nil {
				return UploadSnapshotResult{}, classify(fmt.Errorf("read the index of checkpoint %s: %w", ckID, err))
			}
			if err := a.Blobs.Put(ctx, row.IndexKey, bytes.NewReader(idx.Bytes()), int64(idx.Len())); err != nil {
				return UploadSnapshotResult{}, classify(fmt.Errorf("store index %s: %w", row.IndexKey, err))
			}
		}
		m := snapshot.Manifest{
			Version: snapshot.FormatVersion, SnapshotID: row.ID, BoxID: string(row.BoxID),
			ParentID: row.ParentID, Created: created, Bytes: ex.Bytes, SHA256: ex.SHA256, Files: ex.Files,
			Deleted: ex.Deleted,
		}
		if baseIndex != nil {
			m.BaseID = row.BaseID
		}
		if err := a.putManifest(ctx, m); err != nil {
			return UploadSnapshotResult{}, err
		}
		logger(ctx).Info("snapshot uploaded", "snapshot", row.ID, "base", m.BaseID, "bytes", ex.Bytes, "files", ex.Files,
			"upload", t2.Sub(t1).Round(time.Millisecond), "verify", time.Since(t2).Round(time.Millisecond))
		return UploadSnapshotResult{Bytes: ex.Bytes, SHA256: ex.SHA256, Files: ex.Files}, nil
	})
}

// putManifest stores m beside its snapshot's object.
func (a *Snapshots) putManifest(ctx context.Context, m snapshot.Manifest) error {
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return classify(err)
	}
	mkey := SnapshotManifestKey(cocoonbox.BoxID(m.BoxID), m.SnapshotID)
	if err := a.Blobs.Put(ctx, mkey, bytes.NewReader(body), int64(len(body))); err != nil {
		return classify(fmt.Errorf("store manifest %s: %w", mkey, err))
	}
	return nil
}

// baseIndex reads the index of row's base, which its export is made against, or makes row a
// full snapshot (and returns nil) when there is no base to use: none was chosen, the engine
// cannot export incrementally, or the base's index cannot be read as one.
func (a *Snapshots) baseIndex(ctx context.Context, row cocoonbox.Snapshot, incremental bool) ([]byte, error) {
	if row.BaseID == "" {
		return nil, nil
	}
	why := "the engine cannot export incrementally"
	if incremental {
		data, err := a.readIndex(ctx, row.BaseID)
		if err == nil {
			return data, nil
		}
		if cocoonbox.ErrorCode(err) == cocoonbox.EUnavailable {
			return nil, classify(err) // the store is down: try again later, incrementally
		}
		why = err.Error()
	}
	logger(ctx).Warn("snapshot taken full", "snapshot", row.ID, "base", row.BaseID, "reason", why)
	if err := a.Store.MakeSnapshotFull(ctx, row.ID); err != nil {
		return nil, classify(fmt.Errorf("make snapshot %s full: %w", row.ID, err))
	}
	return nil, nil
}

// readIndex reads snapshot id's index object whole, checking that it parses as one.
func (a *Snapshots) readIndex(ctx context.Context, id string) ([]byte, error) {
	base, err := a.Store.SnapshotByID(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("read base %s: %w", id, err)
	}
	if base.IndexKey == "" {
		return nil, fmt.Errorf("base %s has no index", id)
	}
	rc, err := a.Blobs.Get(ctx, base.IndexKey)
	if err != nil {
		return nil, fmt.Errorf("read index of base %s: %w", id, err)
	}
	defer func() { _ = rc.Close() }()
	data, err := io.ReadAll(io.LimitReader(rc, maxIndexBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("read index of base %s: %w", id, err)
	case len(data) > maxIndexBytes:
		return nil, fmt.Errorf("index of base %s is over %d bytes", id, maxIndexBytes)
	}
	if _, err := snapshot.ReadIndex(bytes.NewReader(data), 0); err != nil {
		return nil, fmt.Errorf("index of base %s: %w", id, err)
	}
	return data, nil
}

// upload pipes the engine's export of checkpoint ckID (incremental against baseIndex when set)
// into the object at key.
func (a *Snapshots) upload(ctx context.Context, porter sandbox.DiskPorter, ckID string, baseIndex []byte, key string, progress *atomic.Int64) (uploaded, error) {
	return a.pipeUpload(ctx, key, "export checkpoint "+ckID, progress, func(ctx context.Context, w io.Writer) (sandbox.DiskExport, error) {
		var base io.Reader
		if baseIndex != nil {
			base = bytes.NewReader(baseIndex)
		}
		// The export checks the stream against the engine's trailers only at its end, so a bad
		// stream fails the upload's last read and the upload is aborted, never completed.
		return porter.ExportCheckpointDisk(ctx, ckID, base, w)
	})
}

// uploaded is what an upload stored: the producer's figures, and whether the store confirmed it
// holds exactly the bytes sent (objstore.UploadResult.Checked), which makes reading them back
// needless.
type uploaded struct {
	sandbox.DiskExport
	checked bool
}

// pipeUpload streams what produce writes into the object at key and returns produce's figures,
// checked against what was stored; what names produce's step in its errors.
func (a *Snapshots) pipeUpload(ctx context.Context, key, what string, progress *atomic.Int64,
	produce func(context.Context, io.Writer) (sandbox.DiskExport, error)) (uploaded, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	type produced struct {
		sum sandbox.DiskExport
		err error
	}
	done := make(chan produced, 1)
	go func() {
		sum, err := produce(ctx, pw)
		_ = pw.CloseWithError(err)
		done <- produced{sum, err}
	}()
	res, upErr := a.Blobs.Upload(ctx, key, throttle(ctx, pr, a.UploadRate), objstore.UploadOptions{
		OnProgress: progress.Store,
	})
	_ = pr.CloseWithError(errors.New("upload ended")) // unblocks produce if the upload failed
	cancel()
	ex := <-done
	switch {
	case ex.err != nil:
		return uploaded{}, classify(fmt.Errorf("%s: %w", what, ex.err))
	case upErr != nil:
		return uploaded{}, classify(fmt.Errorf("upload snapshot: %w", upErr))
	case res.Size != ex.sum.Bytes:
		return uploaded{}, classify(fmt.Errorf("upload snapshot %s: stored %d bytes of %d", key, res.Size, ex.sum.Bytes))
	}
	return uploaded{DiskExport: ex.sum, checked: res.Checked}, nil
}

// verify makes sure the stored object is what the engine exported: nothing is called complete on
// the strength of a 200 alone. The export's stream is checked against the engine's own sha256 as
// it is read, and the store's CRC32 of what it holds against the bytes sent, so an upload the
// store confirmed needs nothing more. A store that reports no checksum has the object read back
// and hashed; a mismatch deletes the object and is retried.
func (a *Snapshots) verify(ctx context.Context, key string, want uploaded, progress *atomic.Int64) error {
	if want.checked {
		return nil
	}
	rc, err := a.Blobs.Get(ctx, key)
	if err != nil {
		return classify(fmt.Errorf("verify snapshot %s: %w", key, err))
	}
	defer func() { _ = rc.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, &countingReader{r: rc, n: progress})
	if err != nil {
		return classify(fmt.Errorf("verify snapshot %s: %w", key, err))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want.SHA256 || n != want.Bytes {
		_ = a.Blobs.Delete(context.WithoutCancel(ctx), key)
		return classify(fmt.Errorf("verify snapshot %s: stored %d bytes with sha256 %s, uploaded %d with %s",
			key, n, got, want.Bytes, want.SHA256))
	}
	return nil
}

// CompleteSnapshot marks the snapshot complete with its verified figures.
func (a *Snapshots) CompleteSnapshot(ctx context.Context, in CompleteSnapshotInput) (cocoonbox.Snapshot, error) {
	s, err := a.Store.CompleteSnapshot(ctx, in.SnapshotID, in.Bytes, in.SHA256, in.Files)
	if err != nil {
		return cocoonbox.Snapshot{}, classify(fmt.Errorf("complete snapshot %s: %w", in.SnapshotID, err))
	}
	return s, nil
}

// FailSnapshot gives up an unfinished snapshot: its row is marked failed, its incomplete uploads
// are aborted and whatever it stored is deleted (left for retention when the store is down). A snapshot that completed is left alone, so a
// late failure report can never destroy a good snapshot.
func (a *Snapshots) FailSnapshot(ctx context.Context, in SnapshotRef) error {
	if err := validateSnapshotRef(in.BoxID, in.SnapshotID); err != nil {
		return err
	}
	s, err := a.Store.SnapshotByID(ctx, in.SnapshotID)
	switch {
	case cocoonbox.ErrorCode(err) == cocoonbox.ENotFound:
		return nil // never begun
	case err != nil:
		return classify(fmt.Errorf("read snapshot %s: %w", in.SnapshotID, err))
	case s.State == cocoonbox.SnapshotComplete:
		return nil
	}
	// The row first: it must not stay uploading because the store that failed the upload cannot
	// take the clean-up either. A failed row's objects are retention's to remove (they are
	// deleted below when the store answers, and by the next prune when it does not).
	if err := a.Store.FailSnapshot(ctx, in.SnapshotID); err != nil {
		return classify(fmt.Errorf("fail snapshot %s: %w", in.SnapshotID, err))
	}
	eng, err := a.boxEngine(ctx, in.BoxID)
	if err != nil {
		return err
	}
	if err := deleteCheckpoints(ctx, eng, in.SnapshotID); err != nil {
		return err
	}
	if err := a.deleteObjects(ctx, in.BoxID, in.SnapshotID); err != nil {
		if cocoonbox.ErrorCode(err) == cocoonbox.EUnavailable {
			activity.GetLogger(ctx).Warn("failed snapshot's objects left for retention", "snapshot", in.SnapshotID, "error", err)
			return nil
		}
		return err
	}
	return nil
}

// deleteObjects removes a snapshot's objects (stream, compacted stream, index, manifest) and any
// incomplete upload of them.
func (a *Snapshots) deleteObjects(ctx context.Context, boxID cocoonbox.BoxID, id string) error {
	key, full := SnapshotObjectKey(boxID, id), SnapshotFullKey(boxID, id)
	for _, k := range []string{key, full} {
		if _, err := a.Blobs.AbortIncomplete(ctx, k, 0); err != nil {
			return classify(fmt.Errorf("abort uploads of %s: %w", k, err))
		}
	}
	for _, k := range []string{key, full, SnapshotIndexKey(boxID, id), SnapshotManifestKey(boxID, id)} {
		if err := a.Blobs.Delete(ctx, k); err != nil && !errors.Is(err, objstore.ErrNotFound) {
			return classify(fmt.Errorf("delete %s: %w", k, err))
		}
	}
	return nil
}

// porterOf is eng's disk export ability, which snapshots need, and what of it the engine
// serves. The client speaks it; the engine says in /v1/info whether it serves it (upstream
// sandboxd has no capabilities there). An engine whose info cannot be read (a tenant token) is
// given the benefit of the doubt for the export, whose call then fails, but not for the rest.
func porterOf(ctx context.Context, eng nodeEngine) (sandbox.DiskPorter, diskCaps, error) {
	p, ok := eng.Client.(sandbox.DiskPorter)
	var caps diskCaps
	if ok {
		if info, err := eng.Info(ctx); err == nil {
			ok = info.Capabilities != nil && info.Capabilities.DiskExport
			caps.incremental = ok && info.Capabilities.IncrementalDisk
			caps.since = caps.incremental && info.Capabilities.CheckpointSince
			caps.importClaim = ok && info.Capabilities.ImportClaim
		}
	}
	if !ok {
		return nil, diskCaps{}, newError(ErrTypeInvalidArgument, errNoDiskExport)
	}
	return p, caps, nil
}

// diskCaps is what a DiskPorter's engine serves beyond a full export and import.
type diskCaps struct {
	incremental bool // an export against an earlier one's index
	since       bool // a checkpoint of what changed since such an index
	importClaim bool // a sandbox claimed with an imported disk, with no checkpoint between
}

// errNoDiskExport is the porter's answer for an engine without disk export (upstream sandboxd),
// whose boxes are snapshotted through their agent instead.
var errNoDiskExport = errors.New("the sandbox engine cannot export or import a box's disk")

// deleteCheckpoints removes eng's checkpoints named name: what an attempt killed before its
// cleanup left behind.
func deleteCheckpoints(ctx context.Context, eng nodeEngine, name string) error {
	cks, err := eng.ListCheckpoints(ctx)
	if err != nil {
		return classify(fmt.Errorf("list checkpoints: %w", err))
	}
	for _, ck := range cks {
		if ck.Name != name {
			continue
		}
		if err := eng.DeleteCheckpoint(ctx, ck.ID); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			return classify(fmt.Errorf("delete checkpoint %s: %w", ck.ID, err))
		}
	}
	return nil
}

// dropCheckpoint deletes a checkpoint of eng that served its purpose, even when ctx has ended; a
// failure is left for the next attempt's deleteCheckpoints.
func dropCheckpoint(ctx context.Context, eng nodeEngine, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = eng.DeleteCheckpoint(ctx, id)
}

func validateSnapshotRef(boxID cocoonbox.BoxID, snapshotID string) error {
	if err := boxID.Validate(); err != nil {
		return classify(err)
	}
	if err := cocoonbox.ValidateSnapshotID("snapshot_id", snapshotID); err != nil {
		return classify(err)
	}
	return nil
}

// countingReader adds what passes through it to n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// throttle caps r at rate bytes per second (0: r itself), sleeping in small steps so a
// cancelled ctx ends it promptly.
func throttle(ctx context.Context, r io.Reader, rate int64) io.Reader {
	if rate <= 0 {
		return r
	}
	return &throttled{ctx: ctx, r: r, rate: rate, start: time.Now()}
}

type throttled struct {
	ctx   context.Context
	r     io.Reader
	rate  int64
	start time.Time
	n     int64
}

func (t *throttled) Read(p []byte) (int, error) {
	if chunk := max(t.rate/10, 1); int64(len(p)) > chunk {
		p = p[:chunk] // a tenth of a second's worth at a time keeps the pace even
	}
	k, err := t.r.Read(p)
	t.n += int64(k)
	due := t.start.Add(time.Duration(float64(t.n) / float64(t.rate) * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		select {
		case <-t.ctx.Done():
			return k, t.ctx.Err()
		case <-time.After(d):
		}
	}
	return k, err
}
