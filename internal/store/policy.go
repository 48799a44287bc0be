package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PolicyDefaults are a user's defaults for the policy of the boxes they create; a nil field is
// the server's default.
type PolicyDefaults struct {
	IdleSeconds          *int64
	Durable              *bool
	KeepSnapshots        *int
	SnapshotEverySeconds *int64
	LeaseIdleSeconds     *int64
	RecordRuns           *bool
}

// PolicyDefaults returns the user's defaults: all nil when they set none.
func (q *Queries) PolicyDefaults(ctx context.Context, userID string) (PolicyDefaults, error) {
	var d PolicyDefaults
	err := q.db.QueryRow(ctx, `SELECT idle_seconds, durable, snapshot_every_seconds, keep_snapshots, lease_idle_seconds, record_runs
		FROM policy_defaults WHERE user_id = $1`, userID).
		Scan(&d.IdleSeconds, &d.Durable, &d.SnapshotEverySeconds, &d.KeepSnapshots, &d.LeaseIdleSeconds, &d.RecordRuns)
	if errors.Is(err, pgx.ErrNoRows) {
		return PolicyDefaults{}, nil
	}
	if err != nil {
		return PolicyDefaults{}, fmt.Errorf("policy defaults: %w", mapErr(err))
	}
	return d, nil
}

// SetPolicyDefaults sets the fields of the user's defaults that d carries; nil fields keep
// theirs. One statement, so two changes at once each keep what the other set.
func (q *Queries) SetPolicyDefaults(ctx context.Context, userID string, d PolicyDefaults) error {
	_, err := q.db.Exec(ctx, `INSERT INTO policy_defaults
		(user_id, idle_seconds, durable, snapshot_every_seconds, keep_snapshots, lease_idle_seconds, record_runs)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (user_id) DO UPDATE SET
			idle_seconds = coalesce($2, policy_defaults.idle_seconds),
			durable = coalesce($3, policy_defaults.durable),
			snapshot_every_seconds = coalesce($4, policy_defaults.snapshot_every_seconds),
			keep_snapshots = coalesce($5, policy_defaults.keep_snapshots),
			lease_idle_seconds = coalesce($6, policy_defaults.lease_idle_seconds),
			record_runs = coalesce($7, policy_defaults.record_runs),
			updated_at = now()`,
		userID, d.IdleSeconds, d.Durable, d.SnapshotEverySeconds, d.KeepSnapshots, d.LeaseIdleSeconds, d.RecordRuns)
	if err != nil {
		return fmt.Errorf("set policy defaults: %w", mapErr(err))
	}
	return nil
}
