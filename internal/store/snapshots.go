package store

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/loomhand/cocoonbox"
)

// NewSnapshot is what BeginSnapshot needs. The ID and object key are chosen by the caller (the
// snapshot activity), which is what makes a retried begin recognizable.
type NewSnapshot struct {
	ID       string
	BoxID    cocoonbox.BoxID
	ParentID string // the box's newest complete snapshot when this one began; empty for none
	// BaseID is the snapshot this one is incremental on (its files are the changes since that
	// base's); empty for a full snapshot. It must be a complete snapshot of the same box.
	BaseID    string
	ObjectKey string
	IndexKey  string // the object holding the index of the snapshot's tree; empty for none
}

// The checksum is stored as 32 bytes and read back as lowercase hex, the form the domain type
// carries. Figures are NULL until complete and read as zero.
const snapshotColumns = `id, box_id, coalesce(parent_id, ''), state, object_key, coalesce(bytes, 0),
	coalesce(encode(sha256, 'hex'), ''), coalesce(file_count, 0), pinned, created_at,
	coalesce(base_id, ''), depth, coalesce(index_key, ''), kind`

func scanSnapshot(row interface{ Scan(...any) error }, s *cocoonbox.Snapshot) error {
	return row.Scan(&s.ID, &s.BoxID, &s.ParentID, &s.State, &s.ObjectKey, &s.Bytes,
		&s.SHA256, &s.Files, &s.Pinned, &s.CreatedAt, &s.BaseID, &s.Depth, &s.IndexKey, &s.Kind)
}

// BeginSnapshot adds a snapshot in state uploading. It is idempotent, because the activity that
// uploads may run more than once: beginning an ID that exists with the same box, parent and
// object key returns the existing row unchanged, whatever its state. The same ID with other
// fields is ErrConflict, and so is an object key another snapshot uses. An unknown box or parent
// is ErrNotFound; a missing ID, box or object key is ErrInvalid, also matching the
// *cocoonbox.Error that names the field.
func (q *Queries) BeginSnapshot(ctx context.Context, ns NewSnapshot) (cocoonbox.Snapshot, error) {
	for _, f := range []struct{ name, value string }{
		{"id", ns.ID}, {"box_id", string(ns.BoxID)}, {"object_key", ns.ObjectKey},
	} {
		if f.value == "" {
			return cocoonbox.Snapshot{}, fmt.Errorf("begin snapshot %s: %w: %w", ns.ID, cocoonbox.Invalid(f.name, "is required"), ErrInvalid)
		}
	}
	var s cocoonbox.Snapshot
	// ON CONFLICT names the primary key only, so a taken object key still fails as a unique
	// violation, while a repeated ID returns no row and is compared below.
	// The depth comes from a base that is complete and the box's own, or there is no row.
	err := scanSnapshot(q.db.QueryRow(ctx,
		`INSERT INTO snapshots (id, box_id, parent_id, state, object_key, base_id, depth, index_key)
		 SELECT $1, $2, NULLIF($3, ''), 'uploading', $4, NULLIF($5, ''),
		        coalesce((SELECT depth + 1 FROM snapshots
		                  WHERE id = $5 AND box_id = $2 AND state = 'complete' AND kind = 'disk'), 0),
		        NULLIF($6, '')
		 WHERE $5 = '' OR EXISTS (SELECT 1 FROM snapshots WHERE id = $5 AND box_id = $2 AND state = 'complete' AND kind = 'disk')
		 ON CONFLICT (id) DO NOTHING RETURNING `+snapshotColumns,
		ns.ID, ns.BoxID, ns.ParentID, ns.ObjectKey, ns.BaseID, ns.IndexKey,
	), &s)
	if err == nil {
		return s, nil
	}
	if err = mapErr(err); !errors.Is(err, ErrNotFound) {
		return cocoonbox.Snapshot{}, fmt.Errorf("begin snapshot %s: %w", ns.ID, err)
	}
	s, err = q.SnapshotByID(ctx, ns.ID)
	if errors.Is(err, ErrNotFound) && ns.BaseID != "" {
		// Nothing was inserted and nothing is there: the base is what is missing.
		return cocoonbox.Snapshot{}, fmt.Errorf("begin snapshot %s: base %s: %w: no complete snapshot of box %s has that ID", ns.ID, ns.BaseID, ErrNotFound, ns.BoxID)
	}
	if err != nil {
		return cocoonbox.Snapshot{}, fmt.Errorf("begin snapshot %s: %w", ns.ID, err)
	}
	if s.BoxID != ns.BoxID || s.ParentID != ns.ParentID || s.ObjectKey != ns.ObjectKey {
		return cocoonbox.Snapshot{}, fmt.Errorf("begin snapshot %s: %w: the ID is taken by a snapshot with other fields", ns.ID, ErrConflict)
	}
	return s, nil
}

// CompleteSnapshot records that snapshot id is uploaded and verified, with its size, checksum
// (64 hex digits, either case) and file count. Completing a complete snapshot with the same
// figures returns it unchanged, so a retried activity succeeds; other figures, or a failed
// snapshot, are ErrConflict. An unknown snapshot is ErrNotFound; a malformed checksum or a
// negative figure is ErrInvalid, also matching the *cocoonbox.Error that names the field.
func (q *Queries) CompleteSnapshot(ctx context.Context, id string, bytes int64, sha256Hex string, files int64) (cocoonbox.Snapshot, error) {
	sum, err := hex.DecodeString(sha256Hex)
	switch {
	case err != nil || len(sum) != 32:
		err = cocoonbox.Invalid("sha256", "must be 64 hex digits")
	case bytes < 0:
		err = cocoonbox.Invalid("bytes", "must not be negative")
	case files < 0:
		err = cocoonbox.Invalid("files", "must not be negative")
	}
	if err != nil {
		return cocoonbox.Snapshot{}, fmt.Errorf("complete snapshot %s: %w: %w", id, err, ErrInvalid)
	}
	var s cocoonbox.Snapshot
	err = scanSnapshot(q.db.QueryRow(ctx,
		`UPDATE snapshots SET state = 'complete', bytes = $2, sha256 = $3, file_count = $4
		 WHERE id = $1 AND state = 'uploading' RETURNING `+snapshotColumns,
		id, bytes, sum, files,
	), &s)
	if err == nil {
		return s, nil
	}
	if err = mapErr(err); !errors.Is(err, ErrNotFound) {
		return cocoonbox.Snapshot{}, fmt.Errorf("complete snapshot %s: %w", id, err)
	}
	// Nothing was uploading under id: it is unknown, or already complete or failed.
	s, err = q.SnapshotByID(ctx, id)
	switch {
	case err != nil:
		return cocoonbox.Snapshot{}, fmt.Errorf("complete snapshot %s: %w", id, err)
	case s.State != cocoonbox.SnapshotComplete:
		return cocoonbox.Snapshot{}, fmt.Errorf("complete snapshot %s: %w: it is %s", id, ErrConflict, s.State)
	case s.Bytes != bytes || s.SHA256 != hex.EncodeToString(sum) || s.Files != files:
		return cocoonbox.Snapshot{}, fmt.Errorf("complete snapshot %s: %w: it is complete with other figures", id, ErrConflict)
	}
	return s, nil
}

// FailSnapshot records that snapshot id's upload was abandoned, so retention can remove the row
// and whatever part of the object was written. Failing a failed snapshot does nothing. A complete
// snapshot is never marked failed (ErrConflict): a retry that gives up after an earlier attempt
// completed must not lose a good snapshot. An unknown snapshot is ErrNotFound.
func (q *Queries) FailSnapshot(ctx context.Context, id string) error {
	tag, err := q.db.Exec(ctx, `UPDATE snapshots SET state = 'failed' WHERE id = $1 AND state = 'uploading'`, id)
	if err != nil {
		return fmt.Errorf("fail snapshot %s: %w", id, mapErr(err))
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	s, err := q.SnapshotByID(ctx, id)
	switch {
	case err != nil:
		return fmt.Errorf("fail snapshot %s: %w", id, err)
	case s.State == cocoonbox.SnapshotComplete:
		return fmt.Errorf("fail snapshot %s: %w: it is complete", id, ErrConflict)
	}
	return nil
}

// SnapshotByID returns the snapshot with id, in any state, or ErrNotFound.
func (q *Queries) SnapshotByID(ctx context.Context, id string) (cocoonbox.Snapshot, error) {
	var s cocoonbox.Snapshot
	if err := scanSnapshot(q.db.QueryRow(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE id = $1`, id), &s); err != nil {
		return cocoonbox.Snapshot{}, fmt.Errorf("snapshot %s: %w", id, mapErr(err))
	}
	return s, nil
}

// ListSnapshots returns every snapshot of boxID in any state, newest first; none is an empty
// list, not an error.
func (q *Queries) ListSnapshots(ctx context.Context, boxID cocoonbox.BoxID) ([]cocoonbox.Snapshot, error) {
	snaps, err := q.listSnapshots(ctx,
		`SELECT `+snapshotColumns+` FROM snapshots WHERE box_id = $1 ORDER BY created_at DESC, id DESC`, boxID)
	if err != nil {
		return nil, fmt.Errorf("list snapshots of box %s: %w", boxID, err)
	}
	return snaps, nil
}

// StaleUploads returns the snapshots still uploading that began before before, oldest first, at
// most limit: the ones a reconciler checks for a workflow still working on them.
func (q *Queries) StaleUploads(ctx context.Context, before time.Time, limit int) ([]cocoonbox.Snapshot, error) {
	snaps, err := q.listSnapshots(ctx,
		`SELECT `+snapshotColumns+` FROM snapshots WHERE state = 'uploading' AND created_at < $1
		 ORDER BY created_at, id LIMIT $2`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list stale uploads: %w", err)
	}
	return snaps, nil
}

// LatestSnapshot returns boxID's newest complete snapshot, the one a wake restores, or
// ErrNotFound when it has none; snapshots still uploading or failed are never returned.
func (q *Queries) LatestSnapshot(ctx context.Context, boxID cocoonbox.BoxID) (cocoonbox.Snapshot, error) {
	var s cocoonbox.Snapshot
	err := scanSnapshot(q.db.QueryRow(ctx,
		`SELECT `+snapshotColumns+` FROM snapshots WHERE box_id = $1 AND state = 'complete'
		 ORDER BY created_at DESC, id DESC LIMIT 1`, boxID,
	), &s)
	if err != nil {
		return cocoonbox.Snapshot{}, fmt.Errorf("latest snapshot of box %s: %w", boxID, mapErr(err))
	}
	return s, nil
}

// SetSnapshotPinned pins snapshot id, so retention keeps it, or unpins it. An unknown snapshot
// is ErrNotFound.
func (q *Queries) SetSnapshotPinned(ctx context.Context, id string, pinned bool) error {
	// RETURNING turns "no such row" into the error that mapErr knows as ErrNotFound.
	var got string
	if err := q.db.QueryRow(ctx, `UPDATE snapshots SET pinned = $2 WHERE id = $1 RETURNING id`, id, pinned).Scan(&got); err != nil {
		return fmt.Errorf("set snapshot %s pinned: %w", id, mapErr(err))
	}
	return nil
}

// DeleteSnapshot removes snapshot id's row in any state; snapshots that name it as their parent
// keep existing with none. A snapshot that is another's base is not deleted (ErrConflict): that
// one would no longer restore. Deleting the object is the caller's business, and should come
// first, so that no object outlives its row unnoticed. An unknown snapshot is ErrNotFound.
func (q *Queries) DeleteSnapshot(ctx context.Context, id string) error {
	var got string
	err := q.db.QueryRow(ctx, `DELETE FROM snapshots WHERE id = $1 RETURNING id`, id).Scan(&got)
	if isForeignKeyViolation(err) {
		return fmt.Errorf("delete snapshot %s: %w: it is the base of an incremental snapshot", id, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, mapErr(err))
	}
	return nil
}

// SnapshotChain returns what restoring snapshot id takes, oldest first: its full base, the
// incremental snapshots on it, and id last. A chain is one box's, every link complete but
// perhaps id itself. An unknown snapshot is ErrNotFound.
func (q *Queries) SnapshotChain(ctx context.Context, id string) ([]cocoonbox.Snapshot, error) {
	snaps, err := q.listSnapshots(ctx, `
		WITH RECURSIVE chain AS (
		    SELECT id, base_id FROM snapshots WHERE id = $1
		    UNION ALL
		    SELECT s.id, s.base_id FROM snapshots s JOIN chain c ON s.id = c.base_id
		)
		SELECT `+snapshotColumns+` FROM snapshots WHERE id IN (SELECT id FROM chain) ORDER BY depth`, id)
	if err != nil {
		return nil, fmt.Errorf("snapshot chain of %s: %w", id, err)
	}
	if len(snaps) == 0 {
		return nil, fmt.Errorf("snapshot chain of %s: %w", id, ErrNotFound)
	}
	for i, s := range snaps {
		if s.Depth != i || (i > 0 && s.BaseID != snaps[i-1].ID) || s.BoxID != snaps[0].BoxID {
			return nil, fmt.Errorf("snapshot chain of %s: %w: link %d (%s) is out of place", id, ErrInvalid, i, s.ID)
		}
	}
	return snaps, nil
}

// MakeSnapshotFull drops the base of snapshot id while it uploads: its upload could not be made
// incremental (the base's index is gone, or the engine cannot), so it holds the whole tree.
func (q *Queries) MakeSnapshotFull(ctx context.Context, id string) error {
	var got string
	err := q.db.QueryRow(ctx,
		`UPDATE snapshots SET base_id = NULL, depth = 0 WHERE id = $1 AND state = 'uploading' RETURNING id`, id).Scan(&got)
	if err != nil {
		return fmt.Errorf("make snapshot %s full: %w", id, mapErr(err))
	}
	return nil
}

// MakeSnapshotState records that snapshot id, while it uploads, is taken through the box's agent
// (kind state): full, with no index.
func (q *Queries) MakeSnapshotState(ctx context.Context, id string) error {
	var got string
	err := q.db.QueryRow(ctx,
		`UPDATE snapshots SET kind = 'state', base_id = NULL, depth = 0, index_key = NULL
		 WHERE id = $1 AND state = 'uploading' RETURNING id`, id).Scan(&got)
	if err != nil {
		return fmt.Errorf("make snapshot %s a state snapshot: %w", id, mapErr(err))
	}
	return nil
}

// CompactSnapshot records that complete snapshot id now lives whole in objectKey, with the
// figures of that full stream: it no longer needs its base, and the snapshots on it are one link
// shorter each. The same compaction recorded again is a no-op; an unknown or incomplete snapshot
// is ErrNotFound.
func (q *Queries) CompactSnapshot(ctx context.Context, id, objectKey string, bytes int64, sha256Hex string, files int64) (cocoonbox.Snapshot, error) {
	sum, err := hex.DecodeString(sha256Hex)
	if err != nil || len(sum) != 32 || bytes < 0 || files < 0 || objectKey == "" {
		return cocoonbox.Snapshot{}, fmt.Errorf("compact snapshot %s: %w: bad figures", id, ErrInvalid)
	}
	var s cocoonbox.Snapshot
	err = scanSnapshot(q.db.QueryRow(ctx, `
		WITH RECURSIVE old AS (
		    SELECT depth FROM snapshots WHERE id = $1 AND state = 'complete'
		), on_it AS (
		    SELECT id FROM snapshots WHERE base_id = $1
		    UNION ALL
		    SELECT s.id FROM snapshots s JOIN on_it o ON s.base_id = o.id
		), shorter AS (
		    UPDATE snapshots SET depth = depth - (SELECT depth FROM old)
		    WHERE id IN (SELECT id FROM on_it) AND EXISTS (SELECT 1 FROM old)
		)
		UPDATE snapshots SET base_id = NULL, depth = 0, object_key = $2, bytes = $3, sha256 = $4, file_count = $5
		WHERE id = $1 AND state = 'complete' RETURNING `+snapshotColumns,
		id, objectKey, bytes, sum, files), &s)
	if err != nil {
		return cocoonbox.Snapshot{}, fmt.Errorf("compact snapshot %s: %w", id, mapErr(err))
	}
	return s, nil
}

// snapshotsToPrune ranks complete snapshots by recency alone: a pinned one among the newest $2
// takes up a slot. So the kept set is "the newest N, plus any pinned", never more than N
// unpinned ones. Failed rows go whether pinned or not, since they hold nothing to restore.
const snapshotsToPrune = `
WITH kept AS (
    SELECT id FROM snapshots WHERE box_id = $1 AND state = 'complete'
    ORDER BY created_at DESC, id DESC LIMIT $2
)
SELECT ` + snapshotColumns + ` FROM snapshots
WHERE box_id = $1 AND (
    state = 'failed' OR
    (state = 'complete' AND NOT pinned AND id NOT IN (SELECT id FROM kept)))
ORDER BY created_at, id`

// SnapshotsToPrune returns what retention removes from boxID, oldest first: failed snapshots, and
// complete ones that are neither pinned nor among the newest keep complete ones (pinned ones
// count among those). keep below 1 counts as 1, so the newest complete snapshot, which a wake
// needs, is never returned; nor is a snapshot still uploading.
func (q *Queries) SnapshotsToPrune(ctx context.Context, boxID cocoonbox.BoxID, keep int) ([]cocoonbox.Snapshot, error) {
	snaps, err := q.listSnapshots(ctx, snapshotsToPrune, boxID, max(keep, 1))
	if err != nil {
		return nil, fmt.Errorf("list snapshots to prune of box %s: %w", boxID, err)
	}
	return snaps, nil
}

// listSnapshots runs a query for snapshot rows; errors are mapped and left for the caller to
// name.
func (q *Queries) listSnapshots(ctx context.Context, sql string, args ...any) ([]cocoonbox.Snapshot, error) {
	rows, err := q.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	snaps := []cocoonbox.Snapshot{}
	for rows.Next() {
		var s cocoonbox.Snapshot
		if err := scanSnapshot(rows, &s); err != nil {
			return nil, mapErr(err)
		}
		snaps = append(snaps, s)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	return snaps, nil
}
