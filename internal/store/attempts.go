package store

import (
	"context"
	"fmt"
	"time"

	"github.com/loomhand/cocoonbox"
)

// Attempts is one best-of-N run: a task run on Forks (Runs[i] on Forks[i]), the judge's Winner
// (1-based; 0 before the judge) with its Reason, and the attempt the user Chose.
type Attempts struct {
	ID      string
	BoxID   cocoonbox.BoxID
	Owner   string
	Task    string
	Model   string
	Forks   []cocoonbox.BoxID
	Runs    []string
	State   cocoonbox.AttemptsState
	Winner  int
	Reason  string
	Chosen  int
	Error   string
	Created time.Time
	Ended   *time.Time
}

const attemptsColumns = `id, box_id, owner_id, task, model, forks, runs, state, coalesce(winner, 0), reason,
	coalesce(chosen, 0), error, created_at, ended_at`

func scanAttempts(row interface{ Scan(...any) error }, a *Attempts) error {
	return row.Scan(&a.ID, &a.BoxID, &a.Owner, &a.Task, &a.Model, &a.Forks, &a.Runs, &a.State, &a.Winner, &a.Reason,
		&a.Chosen, &a.Error, &a.Created, &a.Ended)
}

// CreateAttempts records a best-of-N run in state running; a second create of the same ID
// returns the first row.
func (q *Queries) CreateAttempts(ctx context.Context, a Attempts) (Attempts, error) {
	if len(a.Forks) == 0 || len(a.Forks) != len(a.Runs) {
		return Attempts{}, fmt.Errorf("create attempts %s: %w: %w", a.ID, cocoonbox.Invalid("runs", "must name one run per fork"), ErrInvalid)
	}
	var out Attempts
	err := scanAttempts(q.db.QueryRow(ctx,
		`INSERT INTO agent_attempts (id, box_id, owner_id, task, model, forks, runs, state)
		 VALUES ($1, $2, $3, $4, $5, $6, $7, 'running')
		 ON CONFLICT (id) DO UPDATE SET id = excluded.id RETURNING `+attemptsColumns,
		a.ID, a.BoxID, a.Owner, a.Task, a.Model, a.Forks, a.Runs), &out)
	if err != nil {
		return Attempts{}, fmt.Errorf("create attempts %s: %w", a.ID, mapErr(err))
	}
	return out, nil
}

// AttemptsByID returns a best-of-N run, or ErrNotFound.
func (q *Queries) AttemptsByID(ctx context.Context, id string) (Attempts, error) {
	var a Attempts
	if err := scanAttempts(q.db.QueryRow(ctx, `SELECT `+attemptsColumns+` FROM agent_attempts WHERE id = $1`, id), &a); err != nil {
		return Attempts{}, fmt.Errorf("attempts %s: %w", id, mapErr(err))
	}
	return a, nil
}

// JudgeAttempts records the judge's pick once: a second verdict leaves the first, which it
// returns (a retried judge step whose first try was recorded).
func (q *Queries) JudgeAttempts(ctx context.Context, id string, winner int, reason string) (Attempts, error) {
	var a Attempts
	err := scanAttempts(q.db.QueryRow(ctx,
		`UPDATE agent_attempts SET winner = coalesce(winner, $2), reason = CASE WHEN winner IS NULL THEN $3 ELSE reason END,
		 state = CASE WHEN state IN ('running', 'judging') THEN 'judged' ELSE state END
		 WHERE id = $1 RETURNING `+attemptsColumns, id, winner, reason), &a)
	if err != nil {
		return Attempts{}, fmt.Errorf("judge attempts %s: %w", id, mapErr(err))
	}
	return a, nil
}

// SetAttemptsState moves a best-of-N run to state, with the attempt chosen (0 keeps it) and the
// error of a failed one; a settled state also sets its end.
func (q *Queries) SetAttemptsState(ctx context.Context, id, state string, chosen int, reason string) error {
	_, err := q.db.Exec(ctx,
		`UPDATE agent_attempts SET state = $2, chosen = coalesce(nullif($3, 0), chosen), error = $4,
		 ended_at = CASE WHEN $2 IN ('accepted', 'failed', 'discarded') THEN coalesce(ended_at, now()) END
		 WHERE id = $1`, id, state, chosen, reason)
	if err != nil {
		return fmt.Errorf("set attempts %s %s: %w", id, state, mapErr(err))
	}
	return nil
}
