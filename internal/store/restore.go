package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/loomhand/cocoonbox"
)

// CompleteSnapshots returns every complete snapshot, oldest first: what a backup's manifest lists
// and a restore checks against the bucket.
func (q *Queries) CompleteSnapshots(ctx context.Context) ([]cocoonbox.Snapshot, error) {
	return q.listSnapshots(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE state = 'complete' ORDER BY created_at, id`)
}

// Restored counts what AfterRestore changed.
type Restored struct {
	Boxes int // boxes now asleep without a sandbox
	Runs  int // unfinished agent runs now failed
}

// AfterRestore fits a database just restored from a backup to the deployment it now serves, whose
// engines and Temporal history are not the backup's, in one transaction: every box that is not
// deleted is hibernated without a sandbox (its next wake restores its newest snapshot), with an
// event saying so; every unfinished agent run fails with why; the node records go (live nodes
// register again with their next heartbeat). note says which backup it was.
func (s *Store) AfterRestore(ctx context.Context, note string) (Restored, error) {
	var r Restored
	detail, err := json.Marshal(map[string]string{"detail": note})
	if err != nil {
		return r, err
	}
	err = s.InTx(ctx, func(q *Queries) error {
		rows, err := q.db.Query(ctx,
			`UPDATE boxes SET state = 'hibernated', sandbox_id = NULL, sandbox_token_ciphertext = NULL,
			        sandbox_addr = '', sandbox_node = '', last_error = NULL, updated_at = now(),
			        running_since = NULL -- how long it ran after the dump is not known: not billed
			  WHERE deleted_at IS NULL RETURNING id`)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		r.Boxes = len(ids)
		if _, err := q.db.Exec(ctx,
			`INSERT INTO events (actor, box_id, action, detail)
			 SELECT 'restore', id, 'box.restored', $2 FROM unnest($1::text[]) AS id`, ids, detail); err != nil {
			return err
		}
		tag, err := q.db.Exec(ctx,
			`UPDATE agent_runs SET state = 'failed', ended_at = now(),
			        error = 'the deployment was restored from a backup while the run was unfinished'
			  WHERE ended_at IS NULL`)
		if err != nil {
			return err
		}
		r.Runs = int(tag.RowsAffected())
		_, err = q.db.Exec(ctx, `DELETE FROM nodes`)
		return err
	})
	if err != nil {
		return Restored{}, fmt.Errorf("fit the restored database: %w", mapErr(err))
	}
	return r, nil
}

// LoseSnapshots marks the complete snapshots ids, and every snapshot built on one of them, failed:
// a restore found their objects missing from the bucket (retention removed them after the
// backup), so no wake may try to restore them. It returns the IDs it marked.
func (s *Store) LoseSnapshots(ctx context.Context, ids []string) ([]string, error) {
	rows, err := s.db.Query(ctx,
		`WITH RECURSIVE lost(id) AS (
		     SELECT unnest($1::text[])
		     UNION SELECT s.id FROM snapshots s JOIN lost ON s.base_id = lost.id)
		 UPDATE snapshots SET state = 'failed'
		  WHERE id IN (SELECT id FROM lost) AND state = 'complete' RETURNING id`, ids)
	if err != nil {
		return nil, fmt.Errorf("lose snapshots: %w", mapErr(err))
	}
	lost, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("lose snapshots: %w", mapErr(err))
	}
	return lost, nil
}
