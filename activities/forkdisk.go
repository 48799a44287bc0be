package activities

import (
	"context"
	"fmt"
	"time"

	"github.com/loomhand/cocoonbox"
)

// UploadForkDiskInput is the disk of a fork's checkpoint, on the engine of node Node, to store
// as snapshot SnapshotID of the fork BoxID; At is when the checkpoint was taken.
type UploadForkDiskInput struct {
	BoxID        cocoonbox.BoxID
	SnapshotID   string
	CheckpointID string
	Node         string `json:",omitempty"`
	At           time.Time
}

// UploadForkDisk stores the disk of a fork's checkpoint as the fork's first snapshot, verified
// like any other, so a fork whose parent's node has no room for it is restored on a node that
// has: its disk goes, its memory stays behind. The checkpoint itself is its parent's, left for
// the parent's workflow to drop. Every try starts clean (an earlier try's upload is aborted).
func (a *Snapshots) UploadForkDisk(ctx context.Context, in UploadForkDiskInput) (UploadSnapshotResult, error) {
	if err := validateSnapshotRef(in.BoxID, in.SnapshotID); err != nil {
		return UploadSnapshotResult{}, err
	}
	row, err := a.Store.SnapshotByID(ctx, in.SnapshotID)
	if err != nil {
		return UploadSnapshotResult{}, classify(fmt.Errorf("read snapshot %s: %w", in.SnapshotID, err))
	}
	if row.BoxID != in.BoxID {
		return UploadSnapshotResult{}, classify(cocoonbox.Errorf(cocoonbox.EConflict, "snapshot %s belongs to box %s", in.SnapshotID, row.BoxID))
	}
	eng, err := a.nodeEngine(ctx, in.Node)
	if err != nil {
		return UploadSnapshotResult{}, err
	}
	porter, _, err := porterOf(ctx, eng)
	if err != nil {
		return UploadSnapshotResult{}, err
	}
	key := SnapshotObjectKey(in.BoxID, in.SnapshotID)
	if _, err := a.Blobs.AbortIncomplete(ctx, key, 0); err != nil {
		return UploadSnapshotResult{}, classify(fmt.Errorf("abort earlier uploads of %s: %w", key, err))
	}
	return a.storeDisk(ctx, porter, row, in.CheckpointID, in.At, nil)
}
