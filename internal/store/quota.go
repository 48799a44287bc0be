package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/loomhand/cocoonbox"
)

// ErrQuota means a write would take its owner over a quota; the error also matches the
// *cocoonbox.Error (resource_exhausted) that names the limit.
var ErrQuota = errors.New("over quota")

// BoxQuota bounds one owner's boxes that are not deleted: how many, and the vCPUs and memory of
// their sizes together. A zero field is no limit.
type BoxQuota struct {
	Boxes, VCPUs, MemoryMB int
}

// lockOwner takes a transaction-scoped advisory lock on owner's quotas, so that two writes
// counting the same owner's rows run one after the other, in every process sharing the
// database: the second counts what the first added.
func lockOwner(ctx context.Context, q *Queries, owner string) error {
	if _, err := q.db.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('cocoonbox.quota:' || $1, 0))`, owner); err != nil {
		return fmt.Errorf("lock quota of %s: %w", owner, mapErr(err))
	}
	return nil
}

// CreateBoxWithin is CreateBox inside quota: the new box's owner must stay within quota with
// it counted. Counting and inserting happen under the owner's lock in one transaction, so
// concurrent creates, from any API replica, cannot pass together. A create of an ID that exists
// is CreateBox's idempotent answer, since that box is counted already. Over quota is ErrQuota.
func (s *Store) CreateBoxWithin(ctx context.Context, nb NewBox, quota BoxQuota) (Box, error) {
	var b Box
	err := s.InTx(ctx, func(q *Queries) error {
		if err := lockOwner(ctx, q, nb.Owner); err != nil {
			return err
		}
		if _, err := q.BoxByID(ctx, nb.ID); !errors.Is(err, ErrNotFound) {
			if err != nil {
				return err
			}
			b, err = q.CreateBox(ctx, nb)
			return err
		}
		if err := q.checkBoxQuota(ctx, nb, quota); err != nil {
			return err
		}
		var err error
		b, err = q.CreateBox(ctx, nb)
		return err
	})
	if err != nil {
		return Box{}, fmt.Errorf("create box %s: %w", nb.ID, err)
	}
	return b, nil
}

// checkBoxQuota counts nb.Owner's boxes that are not deleted, by size, and says which limit
// the new box would pass.
func (q *Queries) checkBoxQuota(ctx context.Context, nb NewBox, quota BoxQuota) error {
	rows, err := q.db.Query(ctx,
		`SELECT size, count(*) FROM boxes WHERE owner_id = $1 AND deleted_at IS NULL GROUP BY size`, nb.Owner)
	if err != nil {
		return fmt.Errorf("count boxes of %s: %w", nb.Owner, mapErr(err))
	}
	defer rows.Close()
	var boxes, vcpus, memory int
	for rows.Next() {
		var size cocoonbox.Size
		var n int
		if err := rows.Scan(&size, &n); err != nil {
			return fmt.Errorf("count boxes of %s: %w", nb.Owner, mapErr(err))
		}
		spec := size.Spec()
		boxes, vcpus, memory = boxes+n, vcpus+n*spec.VCPUs, memory+n*spec.MemoryMB
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("count boxes of %s: %w", nb.Owner, mapErr(err))
	}
	spec := nb.Size.Spec()
	over := func(limit, used, need int, name, unit string) error {
		if limit == 0 || used+need <= limit {
			return nil
		}
		e := cocoonbox.QuotaReached(name, limit)
		e.Message += fmt.Sprintf(": your boxes have %d%s and a %s box needs %d more", used, unit, nb.Size, need)
		return fmt.Errorf("%w: %w", ErrQuota, e)
	}
	if limit := quota.Boxes; limit > 0 && boxes+1 > limit {
		return fmt.Errorf("%w: %w", ErrQuota, cocoonbox.QuotaReached("boxes per user", limit))
	}
	if err := over(quota.VCPUs, vcpus, spec.VCPUs, "vCPUs per user", " vCPUs"); err != nil {
		return err
	}
	return over(quota.MemoryMB, memory, spec.MemoryMB, "memory per user in MB", " MB")
}

// CreateAgentRunWithin is CreateAgentRun inside a quota of maxRuns runs of nr.Owner that have
// not ended (0: no limit), counted and inserted under the owner's lock in one transaction. A
// create of an ID that exists is CreateAgentRun's idempotent answer. Over quota is ErrQuota.
func (s *Store) CreateAgentRunWithin(ctx context.Context, nr NewAgentRun, maxRuns int) (AgentRun, error) {
	var r AgentRun
	err := s.InTx(ctx, func(q *Queries) error {
		runs, err := createRunsWithin(ctx, q, []NewAgentRun{nr}, maxRuns)
		if err == nil {
			r = runs[0]
		}
		return err
	})
	if err != nil {
		return AgentRun{}, fmt.Errorf("create agent run %s: %w", nr.ID, err)
	}
	return r, nil
}

// CreateAttemptsWithin records a best-of-N run and the runs of its attempts in one
// transaction, all or none, inside the owner's quota of maxRuns runs that have not ended (the
// runs that exist already, from a request sent again, are not counted twice).
func (s *Store) CreateAttemptsWithin(ctx context.Context, a Attempts, runs []NewAgentRun, maxRuns int) (Attempts, error) {
	var out Attempts
	err := s.InTx(ctx, func(q *Queries) error {
		if _, err := createRunsWithin(ctx, q, runs, maxRuns); err != nil {
			return err
		}
		var err error
		out, err = q.CreateAttempts(ctx, a)
		return err
	})
	return out, err
}

// createRunsWithin creates the runs (of one owner) that do not exist yet, refusing them all
// when they would take the owner past maxRuns runs that have not ended.
func createRunsWithin(ctx context.Context, q *Queries, runs []NewAgentRun, maxRuns int) ([]AgentRun, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	owner := runs[0].Owner
	if err := lockOwner(ctx, q, owner); err != nil {
		return nil, err
	}
	fresh := 0
	for _, nr := range runs {
		if _, err := q.AgentRunByID(ctx, nr.ID); errors.Is(err, ErrNotFound) {
			fresh++
		} else if err != nil {
			return nil, err
		}
	}
	if maxRuns > 0 && fresh > 0 {
		var n int
		if err := q.db.QueryRow(ctx,
			`SELECT count(*) FROM agent_runs WHERE owner_id = $1 AND ended_at IS NULL`, owner).Scan(&n); err != nil {
			return nil, fmt.Errorf("count runs of %s: %w", owner, mapErr(err))
		}
		if n+fresh > maxRuns {
			return nil, fmt.Errorf("%w: %w", ErrQuota, cocoonbox.QuotaReached("concurrent agent runs per user", maxRuns))
		}
	}
	out := make([]AgentRun, 0, len(runs))
	for _, nr := range runs {
		r, err := q.CreateAgentRun(ctx, nr)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// DropUnstartedBox removes the row of a box whose workflow never started (its create was
// reserved by CreateBoxWithin and then failed before Temporal took it), so the reservation does
// not count against its owner forever. Only a box still creating, with no sandbox, is removed;
// anything else is left as it is and reported as ErrConflict.
func (q *Queries) DropUnstartedBox(ctx context.Context, id cocoonbox.BoxID) error {
	tag, err := q.db.Exec(ctx,
		`DELETE FROM boxes WHERE id = $1 AND state = 'creating' AND sandbox_id IS NULL
		   AND NOT EXISTS (SELECT 1 FROM agent_runs WHERE box_id = $1)
		   AND NOT EXISTS (SELECT 1 FROM snapshots WHERE box_id = $1)`, id)
	if err != nil {
		return fmt.Errorf("drop unstarted box %s: %w", id, mapErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("drop unstarted box %s: %w: it is no longer a bare reservation", id, ErrConflict)
	}
	return nil
}
