package store

import (
	"context"
	"fmt"
	"time"

	"github.com/loomhand/cocoonbox"
)

// Recording is a run's recorded desktop: Chunks objects of Bytes (compressed) in the bucket,
// from StartedAt; Ended is nil while it records.
type Recording struct {
	RunID     string
	BoxID     cocoonbox.BoxID
	StartedAt time.Time
	Ended     *time.Time
	Chunks    int
	Bytes     int64
}

const recordingColumns = `run_id, box_id, started_at, ended_at, chunks, bytes`

func scanRecording(row interface{ Scan(...any) error }, r *Recording) error {
	return row.Scan(&r.RunID, &r.BoxID, &r.StartedAt, &r.Ended, &r.Chunks, &r.Bytes)
}

// PutRecording writes a recording's row as it stands (a recorder sends it after every chunk);
// chunks and bytes never go back, so a retried recorder's late write changes nothing.
func (q *Queries) PutRecording(ctx context.Context, r Recording) error {
	_, err := q.db.Exec(ctx,
		`INSERT INTO recordings (run_id, box_id, started_at, ended_at, chunks, bytes) VALUES ($1, $2, $3, $4, $5, $6)
		 ON CONFLICT (run_id) DO UPDATE SET chunks = greatest(recordings.chunks, excluded.chunks),
		   bytes = greatest(recordings.bytes, excluded.bytes), ended_at = coalesce(excluded.ended_at, recordings.ended_at)`,
		r.RunID, r.BoxID, r.StartedAt, r.Ended, r.Chunks, r.Bytes)
	if err != nil {
		return fmt.Errorf("record recording of run %s: %w", r.RunID, mapErr(err))
	}
	return nil
}

// RecordingOfRun returns a run's recording, or ErrNotFound.
func (q *Queries) RecordingOfRun(ctx context.Context, runID string) (Recording, error) {
	var r Recording
	if err := scanRecording(q.db.QueryRow(ctx, `SELECT `+recordingColumns+` FROM recordings WHERE run_id = $1`, runID), &r); err != nil {
		return Recording{}, fmt.Errorf("recording of run %s: %w", runID, mapErr(err))
	}
	return r, nil
}

// BoxRecordings returns the recordings of a box's runs, newest first.
func (q *Queries) BoxRecordings(ctx context.Context, box cocoonbox.BoxID) ([]Recording, error) {
	rows, err := q.db.Query(ctx, `SELECT `+recordingColumns+` FROM recordings WHERE box_id = $1 ORDER BY started_at DESC`, box)
	if err != nil {
		return nil, fmt.Errorf("recordings of box %s: %w", box, mapErr(err))
	}
	defer rows.Close()
	out := []Recording{}
	for rows.Next() {
		var r Recording
		if err := scanRecording(rows, &r); err != nil {
			return nil, fmt.Errorf("recordings of box %s: %w", box, mapErr(err))
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ExpiredRecordings returns ended recordings past their retention, oldest first, at most limit:
// those started before before, and each box's beyond its newest maxBoxBytes (0: no such bound).
func (q *Queries) ExpiredRecordings(ctx context.Context, before time.Time, maxBoxBytes int64, limit int) ([]Recording, error) {
	rows, err := q.db.Query(ctx,
		`SELECT `+recordingColumns+` FROM (
		   SELECT r.*, sum(bytes) OVER (PARTITION BY box_id ORDER BY started_at DESC, run_id DESC) AS kept
		   FROM recordings r WHERE ended_at IS NOT NULL
		 ) x WHERE started_at < $1 OR ($2::bigint > 0 AND kept > $2::bigint)
		 ORDER BY started_at LIMIT $3`, before, maxBoxBytes, limit)
	if err != nil {
		return nil, fmt.Errorf("expired recordings: %w", mapErr(err))
	}
	defer rows.Close()
	out := []Recording{}
	for rows.Next() {
		var r Recording
		if err := scanRecording(rows, &r); err != nil {
			return nil, fmt.Errorf("expired recordings: %w", mapErr(err))
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// DeleteRecording removes a recording's row (its chunks go first, by the caller).
func (q *Queries) DeleteRecording(ctx context.Context, runID string) error {
	if _, err := q.db.Exec(ctx, `DELETE FROM recordings WHERE run_id = $1`, runID); err != nil {
		return fmt.Errorf("delete recording of run %s: %w", runID, mapErr(err))
	}
	return nil
}
