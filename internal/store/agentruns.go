package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loomhand/cocoonbox"
)

// AgentRun is a run's row: the domain run with what it was asked and, once failed, why.
type AgentRun struct {
	cocoonbox.AgentRun
	Task     string
	Provider string
	// Error is the failure a person reads, for a failed run; "" otherwise.
	Error string
	// MaxTokens bounds the input and output tokens of the run's model calls; 0 is no bound.
	MaxTokens int64
}

// NewAgentRun is what CreateAgentRun needs. The ID is chosen by the caller (the API, which also
// names the run's workflow by it), which makes a retried create recognizable.
type NewAgentRun struct {
	ID       string
	BoxID    cocoonbox.BoxID
	Owner    string
	Task     string
	Provider string
	Model    string
	// MaxTokens bounds the run's tokens (input and output of every call); 0 is no bound.
	MaxTokens int64
}

// AgentStep is one recorded step of a run. Payload is the step's record for people and tools
// (text, tool names, stop reason); the conversation the step left is read with AgentConversation.
type AgentStep struct {
	RunID   string
	Step    int
	Kind    string
	Summary string
	Payload json.RawMessage
	At      time.Time
}

// StepPayload is an agent step's payload (AgentStep.Payload): what a person or a tool reads about
// the step. The step activity writes it; the API reads it.
type StepPayload struct {
	Text       string `json:"text,omitempty"`
	Message    string `json:"message,omitempty"`
	Done       bool   `json:"done,omitempty"`
	StopReason string `json:"stop_reason,omitempty"`
	Replayed   bool   `json:"replayed,omitempty"`
	// Question is what the model asked the run's starter this step (ask_user).
	Question  string         `json:"question,omitempty"`
	ToolCalls []StepToolCall `json:"tool_calls,omitempty"`
	// Plan is the checklist the model wrote this step (gui_plan), whole.
	Plan []PlanItem `json:"plan,omitempty"`
}

// PlanItem is one line of the model's plan: its text and todo, doing, done or skipped.
type PlanItem struct {
	Text   string `json:"text"`
	Status string `json:"status"`
}

// StepToolCall is one tool call a step recorded.
type StepToolCall struct {
	Name    string `json:"name"`
	IsError bool   `json:"is_error,omitempty"`
	Images  int32  `json:"images,omitempty"`
	Result  string `json:"result,omitempty"` // cut to 1 KiB
}

// Record decodes the step's payload. A payload it cannot read (a newer or older writer) reads as
// empty: the step's summary still says what happened.
func (s AgentStep) Record() StepPayload {
	var r StepPayload
	_ = json.Unmarshal(s.Payload, &r)
	return r
}

// NewAgentStep is one step to record. Conversation is the agent's opaque conversation after the
// step, which the next step sends back.
type NewAgentStep struct {
	RunID        string
	Step         int
	Kind         string
	Summary      string
	Payload      json.RawMessage // nil is {}
	Conversation []byte
	// Images are the step's screenshots as small PNGs, checked by the caller (AgentStepImages).
	Images [][]byte
}

const agentRunColumns = `id, box_id, owner_id, state, model, created_at, coalesce(ended_at, 'epoch'::timestamptz),
	task, provider, error, max_tokens`

func scanAgentRun(row interface{ Scan(...any) error }, r *AgentRun) error {
	var ended time.Time
	if err := row.Scan(&r.ID, &r.BoxID, &r.Owner, &r.State, &r.Model, &r.CreatedAt, &ended,
		&r.Task, &r.Provider, &r.Error, &r.MaxTokens); err != nil {
		return err
	}
	if ended.Unix() != 0 {
		r.EndedAt = ended
	}
	return nil
}

// CreateAgentRun adds a run in state running. Creating an ID that exists with the same box, owner,
// task, provider and model returns the existing row, so a retried create succeeds; other fields
// are ErrConflict. An unknown box or owner is ErrNotFound; a missing field is ErrInvalid, also
// matching the *cocoonbox.Error that names it.
func (q *Queries) CreateAgentRun(ctx context.Context, nr NewAgentRun) (AgentRun, error) {
	for _, f := range []struct{ name, value string }{
		{"id", nr.ID}, {"box_id", string(nr.BoxID)}, {"owner", nr.Owner}, {"task", nr.Task}, {"model", nr.Model},
	} {
		if f.value == "" {
			return AgentRun{}, fmt.Errorf("create agent run %s: %w: %w", nr.ID, cocoonbox.Invalid(f.name, "is required"), ErrInvalid)
		}
	}
	if nr.MaxTokens < 0 {
		return AgentRun{}, fmt.Errorf("create agent run %s: %w: %w", nr.ID, cocoonbox.Invalid("max_tokens", "must not be negative"), ErrInvalid)
	}
	var r AgentRun
	err := scanAgentRun(q.db.QueryRow(ctx,
		`INSERT INTO agent_runs (id, box_id, owner_id, state, model, task, provider, max_tokens)
		 VALUES ($1, $2, $3, 'running', $4, $5, $6, $7)
		 ON CONFLICT (id) DO NOTHING RETURNING `+agentRunColumns,
		nr.ID, nr.BoxID, nr.Owner, nr.Model, nr.Task, nr.Provider, nr.MaxTokens), &r)
	if err == nil {
		return r, nil
	}
	if err = mapErr(err); !errors.Is(err, ErrNotFound) {
		return AgentRun{}, fmt.Errorf("create agent run %s: %w", nr.ID, err)
	}
	r, err = q.AgentRunByID(ctx, nr.ID)
	if err != nil {
		return AgentRun{}, fmt.Errorf("create agent run %s: %w", nr.ID, err)
	}
	if r.BoxID != nr.BoxID || r.Owner != nr.Owner || r.Task != nr.Task || r.Provider != nr.Provider || r.Model != nr.Model || r.MaxTokens != nr.MaxTokens {
		return AgentRun{}, fmt.Errorf("create agent run %s: %w: the ID is taken by a run with other fields", nr.ID, ErrConflict)
	}
	return r, nil
}

// AgentRunByID returns run id, or ErrNotFound.
func (q *Queries) AgentRunByID(ctx context.Context, id string) (AgentRun, error) {
	var r AgentRun
	err := scanAgentRun(q.db.QueryRow(ctx, `SELECT `+agentRunColumns+` FROM agent_runs WHERE id = $1`, id), &r)
	if err != nil {
		return AgentRun{}, fmt.Errorf("agent run %s: %w", id, mapErr(err))
	}
	return r, nil
}

// ListAgentRuns returns the box's runs, newest first.
func (q *Queries) ListAgentRuns(ctx context.Context, box cocoonbox.BoxID) ([]AgentRun, error) {
	rows, err := q.db.Query(ctx, `SELECT `+agentRunColumns+` FROM agent_runs WHERE box_id = $1
		ORDER BY created_at DESC, id DESC`, box)
	if err != nil {
		return nil, fmt.Errorf("list agent runs of %s: %w", box, mapErr(err))
	}
	defer rows.Close()
	runs := []AgentRun{}
	for rows.Next() {
		var r AgentRun
		if err := scanAgentRun(rows, &r); err != nil {
			return nil, fmt.Errorf("list agent runs of %s: %w", box, mapErr(err))
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list agent runs of %s: %w", box, mapErr(err))
	}
	return runs, nil
}

// ended says whether s is a final state, which stamps ended_at.
func ended(s cocoonbox.AgentRunState) bool {
	return s == cocoonbox.AgentRunSucceeded || s == cocoonbox.AgentRunFailed || s == cocoonbox.AgentRunCancelled
}

// SetAgentRunState records the run's state and, for failed, why. A run that ended stays as it
// ended: setting its own final state again is success (a retried activity), any other state is
// ErrConflict. An unknown run is ErrNotFound; an unknown state is ErrInvalid.
func (q *Queries) SetAgentRunState(ctx context.Context, id string, state cocoonbox.AgentRunState, reason string) error {
	tag, err := q.db.Exec(ctx,
		`UPDATE agent_runs SET state = $2, error = $3,
		   ended_at = CASE WHEN $4::boolean THEN coalesce(ended_at, now()) END
		 WHERE id = $1 AND (ended_at IS NULL OR state = $2)`,
		id, state, reason, ended(state))
	if err != nil {
		return fmt.Errorf("set agent run %s state: %w", id, mapErr(err))
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	r, err := q.AgentRunByID(ctx, id)
	if err != nil {
		return fmt.Errorf("set agent run %s state: %w", id, err)
	}
	return fmt.Errorf("set agent run %s state: %w: the run already %s", id, ErrConflict, r.State)
}

// AppendAgentStep records a step, replacing the row of the same run and number, so a retried
// step activity records the same step once. It also clears the conversations of steps before
// the previous one, which no retry needs any more. An unknown run is ErrNotFound; a negative
// step or a malformed kind is ErrInvalid.
func (q *Queries) AppendAgentStep(ctx context.Context, s NewAgentStep) error {
	payload := s.Payload
	if len(payload) == 0 {
		payload = json.RawMessage(`{}`)
	}
	// One statement, so the step and the clearing land together.
	_, err := q.db.Exec(ctx,
		`WITH up AS (
		   INSERT INTO agent_steps (run_id, step, kind, summary, payload, conversation, images)
		   VALUES ($1, $2, $3, $4, $5, $6, $7)
		   ON CONFLICT (run_id, step) DO UPDATE SET kind = excluded.kind, summary = excluded.summary,
		     payload = excluded.payload, conversation = excluded.conversation, images = excluded.images
		   RETURNING 1
		 )
		 UPDATE agent_steps SET conversation = NULL
		 WHERE run_id = $1 AND step < $2 - 1 AND conversation IS NOT NULL AND EXISTS (SELECT 1 FROM up)`,
		s.RunID, s.Step, s.Kind, s.Summary, []byte(payload), s.Conversation, images(s.Images))
	if err != nil {
		return fmt.Errorf("append agent run %s step %d: %w", s.RunID, s.Step, mapErr(err))
	}
	return nil
}

// images is a step's images for its column: never NULL.
func images(b [][]byte) [][]byte {
	if b == nil {
		return [][]byte{}
	}
	return b
}

// AgentStepImages returns the images of a step of the run, oldest first; a step the run does
// not have is ErrNotFound.
func (q *Queries) AgentStepImages(ctx context.Context, run string, step int) ([][]byte, error) {
	var out [][]byte
	err := q.db.QueryRow(ctx, `SELECT images FROM agent_steps WHERE run_id = $1 AND step = $2`, run, step).Scan(&out)
	if err != nil {
		return nil, fmt.Errorf("agent run %s step %d images: %w", run, step, mapErr(err))
	}
	return out, nil
}

// AgentSteps returns the run's steps in order, without their conversations.
func (q *Queries) AgentSteps(ctx context.Context, run string) ([]AgentStep, error) {
	rows, err := q.db.Query(ctx, `SELECT run_id, step, kind, summary, payload, created_at
		FROM agent_steps WHERE run_id = $1 ORDER BY step`, run)
	if err != nil {
		return nil, fmt.Errorf("agent run %s steps: %w", run, mapErr(err))
	}
	defer rows.Close()
	steps := []AgentStep{}
	for rows.Next() {
		var s AgentStep
		var payload []byte
		if err := rows.Scan(&s.RunID, &s.Step, &s.Kind, &s.Summary, &payload, &s.At); err != nil {
			return nil, fmt.Errorf("agent run %s steps: %w", run, mapErr(err))
		}
		s.Payload = payload
		steps = append(steps, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("agent run %s steps: %w", run, mapErr(err))
	}
	return steps, nil
}

// AgentConversation returns the conversation step left. ErrNotFound when the step is not
// recorded or its conversation was cleared; a step recorded with none returns nil.
func (q *Queries) AgentConversation(ctx context.Context, run string, step int) ([]byte, error) {
	var conv []byte
	var cleared bool
	err := q.db.QueryRow(ctx, `SELECT conversation, conversation IS NULL AND step < (
		  SELECT max(step) - 1 FROM agent_steps WHERE run_id = $1)
		FROM agent_steps WHERE run_id = $1 AND step = $2`, run, step).Scan(&conv, &cleared)
	if err != nil {
		return nil, fmt.Errorf("agent run %s step %d conversation: %w", run, step, mapErr(err))
	}
	if cleared {
		return nil, fmt.Errorf("agent run %s step %d conversation: %w: cleared", run, step, ErrNotFound)
	}
	return conv, nil
}

// OpenRunsOf returns the IDs of user owner's runs that have not ended, oldest first.
func (q *Queries) OpenRunsOf(ctx context.Context, owner string) ([]string, error) {
	rows, err := q.db.Query(ctx,
		`SELECT id FROM agent_runs WHERE owner_id = $1 AND ended_at IS NULL ORDER BY created_at`, owner)
	if err != nil {
		return nil, fmt.Errorf("open runs of %s: %w", owner, mapErr(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("open runs of %s: %w", owner, mapErr(err))
	}
	return ids, nil
}
