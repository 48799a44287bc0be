package store

import (
	"context"
	"fmt"
	"time"

	"github.com/loomhand/cocoonbox"
)

// ModelCall is one model call a worker relayed for a run's step, with the usage the gateway
// reported in its answer.
type ModelCall struct {
	RunID  string
	Step   int
	BoxID  cocoonbox.BoxID
	User   string // the run's starter, who is billed
	Model  string
	Status int // the gateway's HTTP status; 0 when it could not be reached
	// InputTokens includes CachedTokens, the part of the prompt the provider read from its cache.
	InputTokens, OutputTokens, CachedTokens int64
	Latency                                 time.Duration
}

// RecordModelCall appends a model call to the ledger.
func (q *Queries) RecordModelCall(ctx context.Context, c ModelCall) error {
	_, err := q.db.Exec(ctx,
		`INSERT INTO model_calls (run_id, step, box_id, user_id, model, status, input_tokens, output_tokens, cached_tokens, latency_ms)
		 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		c.RunID, c.Step, c.BoxID, c.User, c.Model, c.Status, max(c.InputTokens, 0), max(c.OutputTokens, 0),
		max(c.CachedTokens, 0), c.Latency.Milliseconds())
	if err != nil {
		return fmt.Errorf("record model call of run %s: %w", c.RunID, mapErr(err))
	}
	return nil
}

// RunTokens is what run id has spent so far: the input and output tokens of its calls, and the
// bound its starter set (0: none).
func (q *Queries) RunTokens(ctx context.Context, id string) (used, limit int64, err error) {
	err = q.db.QueryRow(ctx,
		`SELECT coalesce((SELECT sum(input_tokens + output_tokens) FROM model_calls WHERE run_id = $1), 0)::bigint,
		        max_tokens
		   FROM agent_runs WHERE id = $1`, id).Scan(&used, &limit)
	if err != nil {
		return 0, 0, fmt.Errorf("tokens of run %s: %w", id, mapErr(err))
	}
	return used, limit, nil
}

// Usage groupings.
const (
	UsageByUser  = "user"
	UsageByBox   = "box"
	UsageByRun   = "run"
	UsageByModel = "model"
)

// UsageFilter selects and groups the ledger's rows.
type UsageFilter struct {
	By    string    // one of the UsageBy groupings
	Since time.Time // rows at or after it
	User  string    // only this user's calls; "" for everyone's (admins)
}

// UsageRow is one group's sums. Model is the group's model when the rows are grouped by model or
// by run (a run has one), else "".
type UsageRow struct {
	Key                                     string
	Model                                   string
	Calls                                   int64
	InputTokens, OutputTokens, CachedTokens int64
	// UserName is the user's name, for rows grouped by user.
	UserName string
}

// Usage sums the ledger per group, largest total first.
func (q *Queries) Usage(ctx context.Context, f UsageFilter) ([]UsageRow, error) {
	var key, model string
	switch f.By {
	case UsageByUser:
		key, model = "c.user_id", "''"
	case UsageByBox:
		key, model = "c.box_id", "''"
	case UsageByRun:
		key, model = "c.run_id", "min(c.model)"
	case UsageByModel:
		key, model = "c.model", "c.model"
	default:
		return nil, fmt.Errorf("usage: %w: %w", cocoonbox.Invalid("by", fmt.Sprintf("must be user, box, run or model, got %q", f.By)), ErrInvalid)
	}
	rows, err := q.db.Query(ctx, `SELECT `+key+`, `+model+`, count(*), sum(c.input_tokens)::bigint, sum(c.output_tokens)::bigint,
		       sum(c.cached_tokens)::bigint, coalesce(min(u.name), '')
		  FROM model_calls c LEFT JOIN users u ON u.id = c.user_id
		 WHERE c.at >= $1 AND ($2 = '' OR c.user_id = $2)
		 GROUP BY `+key+`
		 ORDER BY sum(c.input_tokens + c.output_tokens) DESC, `+key,
		f.Since, f.User)
	if err != nil {
		return nil, fmt.Errorf("usage: %w", mapErr(err))
	}
	defer rows.Close()
	out := []UsageRow{}
	for rows.Next() {
		var r UsageRow
		var name string
		if err := rows.Scan(&r.Key, &r.Model, &r.Calls, &r.InputTokens, &r.OutputTokens, &r.CachedTokens, &name); err != nil {
			return nil, fmt.Errorf("usage: %w", mapErr(err))
		}
		if f.By == UsageByUser {
			r.UserName = name
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("usage: %w", mapErr(err))
	}
	return out, nil
}

// UsageByModelOf is f's groups split by model: a row per group and model, keyed by the group.
func (q *Queries) UsageByModelOf(ctx context.Context, f UsageFilter) ([]UsageRow, error) {
	var key string
	switch f.By {
	case UsageByUser:
		key = "user_id"
	case UsageByBox:
		key = "box_id"
	default:
		return nil, fmt.Errorf("usage by model of: %w: %w", cocoonbox.Invalid("by", fmt.Sprintf("must be user or box, got %q", f.By)), ErrInvalid)
	}
	rows, err := q.db.Query(ctx, `SELECT `+key+`, model, count(*), sum(input_tokens)::bigint, sum(output_tokens)::bigint,
		       sum(cached_tokens)::bigint
		  FROM model_calls
		 WHERE at >= $1 AND ($2 = '' OR user_id = $2)
		 GROUP BY `+key+`, model`, f.Since, f.User)
	if err != nil {
		return nil, fmt.Errorf("usage by model of: %w", mapErr(err))
	}
	defer rows.Close()
	var out []UsageRow
	for rows.Next() {
		var r UsageRow
		if err := rows.Scan(&r.Key, &r.Model, &r.Calls, &r.InputTokens, &r.OutputTokens, &r.CachedTokens); err != nil {
			return nil, fmt.Errorf("usage by model of: %w", mapErr(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("usage by model of: %w", mapErr(err))
	}
	return out, nil
}

// Spend is what a run and its starter have used of their bounds (0: no bound): the run's tokens
// against its max_tokens, and the starter's tokens this calendar month (UTC) against their
// monthly budget.
type Spend struct {
	RunUsed, RunLimit   int64
	UserUsed, UserLimit int64
}

// RunSpend reads run id's Spend in one statement.
func (q *Queries) RunSpend(ctx context.Context, id string) (Spend, error) {
	var s Spend
	err := q.db.QueryRow(ctx,
		`SELECT coalesce((SELECT sum(input_tokens + output_tokens) FROM model_calls WHERE run_id = r.id), 0)::bigint,
		        r.max_tokens,
		        coalesce((SELECT sum(input_tokens + output_tokens) FROM model_calls
		                   WHERE user_id = r.owner_id AND at >= `+monthStart+`), 0)::bigint,
		        coalesce((SELECT tokens_per_month FROM user_budgets WHERE user_id = r.owner_id), 0)
		   FROM agent_runs r WHERE r.id = $1`, id).Scan(&s.RunUsed, &s.RunLimit, &s.UserUsed, &s.UserLimit)
	if err != nil {
		return Spend{}, fmt.Errorf("spend of run %s: %w", id, mapErr(err))
	}
	return s, nil
}

// Budget is a user's monthly budgets (0: none) and what they used of them this calendar month
// (UTC): their runs' tokens, and the hours their boxes ran.
type Budget struct {
	User             string
	TokensPerMonth   int64
	TokensUsed       int64
	BoxHoursPerMonth float64
	BoxHoursUsed     float64
}

// BudgetChange changes the budgets it names (nil: unchanged); 0 removes a budget.
type BudgetChange struct {
	TokensPerMonth   *int64
	BoxHoursPerMonth *float64
}

// SetUserBudget changes the user's monthly budgets. An unknown user is ErrNotFound; a negative
// budget is ErrInvalid naming it.
func (q *Queries) SetUserBudget(ctx context.Context, userID string, c BudgetChange) error {
	switch {
	case c.TokensPerMonth != nil && *c.TokensPerMonth < 0:
		return fmt.Errorf("set budget of %s: %w: %w", userID, cocoonbox.Invalid("tokens_per_month", "must be 0 (no budget) or more"), ErrInvalid)
	case c.BoxHoursPerMonth != nil && !(*c.BoxHoursPerMonth >= 0):
		return fmt.Errorf("set budget of %s: %w: %w", userID, cocoonbox.Invalid("box_hours_per_month", "must be 0 (no budget) or more"), ErrInvalid)
	}
	_, err := q.db.Exec(ctx, `INSERT INTO user_budgets (user_id, tokens_per_month, box_hours_per_month)
		VALUES ($1, coalesce($2::bigint, 0), coalesce($3::double precision, 0))
		ON CONFLICT (user_id) DO UPDATE SET
		    tokens_per_month = coalesce($2::bigint, user_budgets.tokens_per_month),
		    box_hours_per_month = coalesce($3::double precision, user_budgets.box_hours_per_month),
		    updated_at = now()`, userID, c.TokensPerMonth, c.BoxHoursPerMonth)
	if err != nil {
		return fmt.Errorf("set budget of %s: %w", userID, mapErr(err))
	}
	return nil
}

// monthStart is the start of the calendar month (UTC) in SQL.
const monthStart = `(date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')`

// boxHoursOf sums the hours the boxes of the user user (an SQL expression) ran this month, the
// times under way included.
func boxHoursOf(user string) string {
	return `coalesce((SELECT sum(extract(epoch FROM ended_at - greatest(started_at, ` + monthStart + `)))
	FROM box_runtime WHERE user_id = ` + user + ` AND ended_at > ` + monthStart + `), 0) / 3600 +
	coalesce((SELECT sum(extract(epoch FROM now() - greatest(running_since, ` + monthStart + `)))
	FROM boxes WHERE owner_id = ` + user + ` AND running_since IS NOT NULL AND deleted_at IS NULL), 0) / 3600`
}

// BoxHours is what a box's owner may still run: their box-hours this month and their budget
// (0: none, and then the hours are not summed).
type BoxHours struct {
	Owner       string
	Used, Limit float64
}

// Refusal is the error of a create or wake once the hours are used (resource_exhausted, naming
// the budget), or nil while some are left or there is no budget.
func (h BoxHours) Refusal() error {
	if h.Limit <= 0 || h.Used < h.Limit {
		return nil
	}
	return cocoonbox.Errorf(cocoonbox.EResourceExhausted,
		"budget: the boxes of user %s ran %.2f of their %g box-hours this month (the monthly budget an admin set); running boxes go on, none is created or woken", h.Owner, h.Used, h.Limit)
}

// BoxHoursOfBox is the BoxHours of box id's owner; an unknown box is ErrNotFound.
func (q *Queries) BoxHoursOfBox(ctx context.Context, id cocoonbox.BoxID) (BoxHours, error) {
	return q.boxHours(ctx, `FROM boxes x LEFT JOIN user_budgets b ON b.user_id = x.owner_id WHERE x.id = $1`, "x.owner_id", string(id))
}

// BoxHoursOfUser is the BoxHours of user id.
func (q *Queries) BoxHoursOfUser(ctx context.Context, id string) (BoxHours, error) {
	return q.boxHours(ctx, `FROM users x LEFT JOIN user_budgets b ON b.user_id = x.id WHERE x.id = $1`, "x.id", id)
}

func (q *Queries) boxHours(ctx context.Context, from, owner, arg string) (BoxHours, error) {
	var h BoxHours
	err := q.db.QueryRow(ctx, `SELECT `+owner+`, coalesce(b.box_hours_per_month, 0),
		CASE WHEN coalesce(b.box_hours_per_month, 0) > 0 THEN (`+boxHoursOf(owner)+`)::double precision ELSE 0 END `+from,
		arg).Scan(&h.Owner, &h.Limit, &h.Used)
	if err != nil {
		return BoxHours{}, fmt.Errorf("box-hours of %s: %w", arg, mapErr(err))
	}
	return h, nil
}

// UserBudget is the user's budgets and what they used of them this calendar month (UTC).
func (q *Queries) UserBudget(ctx context.Context, userID string) (Budget, error) {
	b := Budget{User: userID}
	err := q.db.QueryRow(ctx,
		`SELECT coalesce((SELECT tokens_per_month FROM user_budgets WHERE user_id = $1), 0),
		        coalesce((SELECT sum(input_tokens + output_tokens) FROM model_calls
		                   WHERE user_id = $1 AND at >= `+monthStart+`), 0)::bigint,
		        coalesce((SELECT box_hours_per_month FROM user_budgets WHERE user_id = $1), 0),
		        (`+boxHoursOf("$1")+`)::double precision`,
		userID).Scan(&b.TokensPerMonth, &b.TokensUsed, &b.BoxHoursPerMonth, &b.BoxHoursUsed)
	if err != nil {
		return Budget{}, fmt.Errorf("budget of %s: %w", userID, mapErr(err))
	}
	return b, nil
}

// StepUsage is what one step's calls of one model used.
type StepUsage struct {
	Step                                    int
	Model                                   string
	InputTokens, OutputTokens, CachedTokens int64
}

// RunStepUsage returns what the run's model calls used, by step and model, in step order.
func (q *Queries) RunStepUsage(ctx context.Context, run string) ([]StepUsage, error) {
	rows, err := q.db.Query(ctx, `SELECT step, model, sum(input_tokens)::bigint, sum(output_tokens)::bigint, sum(cached_tokens)::bigint
		  FROM model_calls WHERE run_id = $1 GROUP BY step, model ORDER BY step, model`, run)
	if err != nil {
		return nil, fmt.Errorf("run %s usage by step: %w", run, mapErr(err))
	}
	defer rows.Close()
	var out []StepUsage
	for rows.Next() {
		var u StepUsage
		if err := rows.Scan(&u.Step, &u.Model, &u.InputTokens, &u.OutputTokens, &u.CachedTokens); err != nil {
			return nil, fmt.Errorf("run %s usage by step: %w", run, mapErr(err))
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("run %s usage by step: %w", run, mapErr(err))
	}
	return out, nil
}
