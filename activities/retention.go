package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/snapshot"
)

// PruneSnapshots deletes the objects, then the rows, of the snapshots retention gives up (or of
// all of a box's snapshots). Objects go first: a crash in between leaves a row whose object is
// gone, which the next prune finishes, never an object nobody knows about.
//
// A snapshot given up that a kept one is built on (its base, or a base under that) is held, not
// deleted, until more than keep of them are held; then each kept snapshot standing on a given-up
// base is compacted into a full one, and the bases go. So a box stores at most about twice keep
// snapshots, and re-uploads its whole disk about once per keep snapshots, not once per snapshot.
func (a *Snapshots) PruneSnapshots(ctx context.Context, in PruneSnapshotsInput) (PruneSnapshotsResult, error) {
	if err := in.BoxID.Validate(); err != nil {
		return PruneSnapshotsResult{}, classify(err)
	}
	all, err := a.Store.ListSnapshots(ctx, in.BoxID) // newest first
	if err != nil {
		return PruneSnapshotsResult{}, classify(fmt.Errorf("list snapshots of box %s: %w", in.BoxID, err))
	}
	victims := all
	var compactErr error
	if !in.All {
		if victims, err = a.Store.SnapshotsToPrune(ctx, in.BoxID, in.Keep); err != nil {
			return PruneSnapshotsResult{}, classify(fmt.Errorf("list snapshots to prune of box %s: %w", in.BoxID, err))
		}
		victims, compactErr = a.spareBases(ctx, all, victims, max(in.Keep, 1))
		if all, err = a.Store.ListSnapshots(ctx, in.BoxID); err != nil { // compactions dropped bases
			return PruneSnapshotsResult{}, classify(fmt.Errorf("list snapshots of box %s: %w", in.BoxID, err))
		}
	}
	// Newest first: what is built on a base goes before it.
	slices.SortStableFunc(victims, func(x, y cocoonbox.Snapshot) int { return y.CreatedAt.Compare(x.CreatedAt) })
	gone := map[string]bool{}
	for _, s := range victims {
		gone[s.ID] = true
	}
	var out PruneSnapshotsResult
	for _, s := range victims {
		if dep := dependent(all, s.ID, gone); dep != "" {
			// Never reached by the plan above; the object must not go while dep needs it.
			return out, classify(fmt.Errorf("prune snapshot %s: %s is built on it", s.ID, dep))
		}
		if err := a.deleteObjects(ctx, in.BoxID, s.ID); err != nil {
			return out, err
		}
		if err := a.Store.DeleteSnapshot(ctx, s.ID); err != nil && cocoonbox.ErrorCode(err) != cocoonbox.ENotFound {
			return out, classify(fmt.Errorf("delete snapshot %s: %w", s.ID, err))
		}
		out.Deleted = append(out.Deleted, s.ID)
	}
	if compactErr != nil {
		return out, compactErr
	}
	return out, nil
}

// dependent names a snapshot of all, not being deleted, whose base is id; "" when there is none.
func dependent(all []cocoonbox.Snapshot, id string, gone map[string]bool) string {
	for _, s := range all {
		if s.BaseID == id && !gone[s.ID] {
			return s.ID
		}
	}
	return ""
}

// spareBases takes out of victims the bases the snapshots that stay are built on, or, when more
// than keep would be held, compacts those snapshots so that their bases can go. A compaction
// that fails holds its bases and is reported after the rest is pruned.
func (a *Snapshots) spareBases(ctx context.Context, all, victims []cocoonbox.Snapshot, keep int) ([]cocoonbox.Snapshot, error) {
	byID := map[string]cocoonbox.Snapshot{}
	for _, s := range all {
		byID[s.ID] = s
	}
	isVictim := map[string]bool{}
	for _, s := range victims {
		isVictim[s.ID] = true
	}
	held := map[string]bool{}
	hold := func(s cocoonbox.Snapshot) {
		for b := s.BaseID; b != ""; b = byID[b].BaseID {
			if isVictim[b] {
				held[b] = true
			}
		}
	}
	var standing []cocoonbox.Snapshot // staying snapshots whose base is given up, oldest first
	for i := len(all) - 1; i >= 0; i-- {
		s := all[i]
		if isVictim[s.ID] || s.BaseID == "" || !isVictim[s.BaseID] {
			continue
		}
		if s.State == cocoonbox.SnapshotComplete {
			standing = append(standing, s)
		}
		hold(s) // until it is compacted
	}
	var failed error
	if len(held) > keep {
		clear(held)
		for _, s := range standing {
			if err := a.compact(ctx, s); err != nil {
				logger(ctx).Warn("compact snapshot", "snapshot", s.ID, "error", err)
				failed = errors.Join(failed, err)
				hold(s)
			}
		}
		for _, s := range all { // snapshots still uploading keep their bases
			if !isVictim[s.ID] && s.State != cocoonbox.SnapshotComplete && s.BaseID != "" {
				hold(s)
			}
		}
	}
	return slices.DeleteFunc(victims, func(s cocoonbox.Snapshot) bool { return held[s.ID] }), failed
}

// compact rewrites incremental snapshot s as a full one: its chain is imported into the engine as
// a checkpoint, exported whole into SnapshotFullKey, verified, and recorded, after which its old
// object goes. A crash anywhere leaves s restorable from its chain or from its new object.
func (a *Snapshots) compact(ctx context.Context, s cocoonbox.Snapshot) error {
	eng := a.own()
	porter, _, err := porterOf(ctx, eng)
	if err != nil {
		return err
	}
	name := "compact." + s.ID
	if err := deleteCheckpoints(ctx, eng, name); err != nil {
		return err
	}
	key := SnapshotFullKey(s.BoxID, s.ID)
	if _, err := a.Blobs.AbortIncomplete(ctx, key, 0); err != nil {
		return classify(fmt.Errorf("abort earlier uploads of %s: %w", key, err))
	}
	var progress atomic.Int64
	details := func() any { return uploadProgress{Phase: "compact", Bytes: progress.Load()} }
	_, err = withHeartbeats(ctx, details, func(ctx context.Context) (struct{}, error) {
		ck, err := a.importSnapshot(ctx, porter, s, sandbox.PoolKey{Template: a.template(), Net: sandbox.NetNone,
			Size: string(cocoonbox.DefaultSize)}, name)
		if err != nil {
			return struct{}{}, err
		}
		defer dropCheckpoint(ctx, eng, ck.ID)
		ex, err := a.upload(ctx, porter, ck.ID, nil, key, &progress)
		if err != nil {
			return struct{}{}, err
		}
		if err := a.verify(ctx, key, ex, &progress); err != nil {
			return struct{}{}, err
		}
		if _, err := a.Store.CompactSnapshot(ctx, s.ID, key, ex.Bytes, ex.SHA256, ex.Files); err != nil {
			return struct{}{}, classify(fmt.Errorf("record compacted snapshot %s: %w", s.ID, err))
		}
		m := snapshot.Manifest{Version: snapshot.FormatVersion, SnapshotID: s.ID, BoxID: string(s.BoxID),
			ParentID: s.ParentID, Created: s.CreatedAt, Bytes: ex.Bytes, SHA256: ex.SHA256, Files: ex.Files}
		if err := a.putManifest(ctx, m); err != nil {
			return struct{}{}, err
		}
		if s.ObjectKey != key {
			if err := a.Blobs.Delete(ctx, s.ObjectKey); err != nil {
				logger(ctx).Warn("delete the incremental object of a compacted snapshot", "key", s.ObjectKey, "error", err)
			}
		}
		logger(ctx).Info("snapshot compacted", "snapshot", s.ID, "bytes", ex.Bytes, "files", ex.Files)
		return struct{}{}, nil
	})
	return err
}
