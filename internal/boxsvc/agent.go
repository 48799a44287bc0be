package boxsvc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// maxTaskBytes bounds a task or a message; longer instructions belong in a file in the box.
const maxTaskBytes = 32 << 10

// MaxRunSteps bounds what a run request may ask for as its step budget: each step is a model
// call paid from the caller's key, and a run this long has lost its way.
const MaxRunSteps = 500

// RunRequest is a task for a box's agent. The gateway, its protocol and the key's vault secret
// are the service's Agent configuration, never the caller's: a caller chooses what the agent
// does and with which model, not where the box's model calls go.
type RunRequest struct {
	Task     string
	Model    string // "" is Agent.Model
	System   string
	MaxSteps int // 0 is Agent.MaxSteps
	// MaxTokens bounds the input and output tokens of the run's model calls; 0 is no bound.
	MaxTokens int64
	// Record records the box's desktop while the run goes, for replay beside its steps.
	Record bool
}

// Run is an agent run with its steps (GetRun) or without (the others).
type Run struct {
	store.AgentRun
	Steps []store.AgentStep
	// StepsDone and Result are known where the steps were read (GetRun, WatchRun): how many are
	// recorded and what the agent last said.
	StepsDone int
	Result    string
	// TokensUsed is what the run's model calls used so far, from the ledger (GetRun, WatchRun).
	TokensUsed int64
	// Plan is the checklist of the newest step that wrote one (GetRun, WatchRun).
	Plan []store.PlanItem
	// StepCosts are what each step's model calls used and cost, by step number (GetRun).
	StepCosts map[int]StepCost
	// Recording is the run's recorded desktop, when it was recorded (GetRun).
	Recording *store.Recording
}

// StepCost is what a step's model calls used, and their cost at the configured prices.
type StepCost struct {
	Tokens  int64
	CostUSD float64
}

// withSteps is run with what its recorded steps and the ledger tell about it. A ledger that
// cannot be read leaves TokensUsed 0, logged: the run itself was read.
func (s *Service) withSteps(ctx context.Context, run store.AgentRun, steps []store.AgentStep) Run {
	r := Run{AgentRun: run, StepsDone: len(steps)}
	for i := len(steps) - 1; i >= 0 && r.Result == ""; i-- {
		r.Result = steps[i].Record().Text
	}
	for i := len(steps) - 1; i >= 0 && r.Plan == nil; i-- {
		r.Plan = steps[i].Record().Plan
	}
	used, _, err := s.Store.RunTokens(ctx, run.ID)
	if err != nil && s.Logger != nil {
		s.Logger.Warn("read run tokens", "run", run.ID, "err", err)
	}
	r.TokensUsed = used
	return r
}

// StartRun gives the box's agent a task (driver): it records the run and starts its workflow,
// which pins the box awake and drives the agent. The model key comes from the caller's vault.
func (s *Service) StartRun(ctx context.Context, caller string, id cocoonbox.BoxID, req RunRequest) (Run, error) {
	if _, err := s.authorize(ctx, caller, id, cocoonbox.RoleDriver); err != nil {
		return Run{}, err
	}
	req, err := s.checkRun(req)
	if err != nil {
		return Run{}, err
	}
	if !req.Record {
		req.Record = s.recordsRuns(ctx, id)
	}
	runID := workflows.RunIDPrefix + randomHex()
	run, err := s.Store.CreateAgentRunWithin(ctx, store.NewAgentRun{ID: runID, BoxID: id, Owner: caller,
		Task: req.Task, Provider: s.Agent.Provider, Model: req.Model, MaxTokens: req.MaxTokens}, s.Quota.Runs)
	if errors.Is(err, store.ErrQuota) {
		return Run{}, err
	}
	if err != nil {
		return Run{}, fmt.Errorf("record run: %w", err)
	}
	err = workflows.StartRun(ctx, s.Temporal, workflows.AgentRunInput{
		RunID: runID, BoxID: id, Owner: caller, Task: req.Task, System: req.System, Model: req.Model,
		MaxSteps: req.MaxSteps, Record: req.Record,
	})
	if err != nil {
		// The run never started: say so on its row rather than leave it running forever.
		if serr := s.Store.SetAgentRunState(context.WithoutCancel(ctx), runID, cocoonbox.AgentRunFailed, "could not start"); serr != nil && s.Logger != nil {
			s.Logger.Warn("record unstarted run", "run", runID, "err", serr)
		}
		return Run{}, err
	}
	s.audit(ctx, caller, id, "agent.start", map[string]any{"run": runID, "model": req.Model})
	return Run{AgentRun: run}, nil
}

// checkRun checks a run's request against this server's agent configuration and fills in its
// defaults.
func (s *Service) checkRun(req RunRequest) (RunRequest, error) {
	if req.MaxSteps < 0 || req.MaxSteps > MaxRunSteps {
		return req, cocoonbox.Invalid("max_steps", fmt.Sprintf("must be between 1 and %d, or 0 for the default", MaxRunSteps))
	}
	if req.MaxTokens < 0 {
		return req, cocoonbox.Invalid("max_tokens", fmt.Sprintf("must be 0 (no bound) or more, got %d", req.MaxTokens))
	}
	req = withDefaults(req, s.Agent)
	switch {
	case strings.TrimSpace(req.Task) == "":
		return req, cocoonbox.Invalid("task", "is required")
	case len(req.Task) > maxTaskBytes:
		return req, cocoonbox.Invalid("task", fmt.Sprintf("is longer than %d bytes", maxTaskBytes))
	case s.Agent.Provider == "" || s.Agent.BaseURL == "":
		return req, cocoonbox.Errorf(cocoonbox.EUnavailable, "agent runs are not configured on this server: its configuration needs agent.provider and agent.base_url")
	case req.Model == "":
		return req, cocoonbox.Invalid("model", "is required: this server has no default model")
	case len(s.Agent.Models) > 0 && !slices.Contains(s.Agent.Models, req.Model):
		return req, cocoonbox.Invalid("model", fmt.Sprintf("%q is not offered here; choose one of %s", req.Model, strings.Join(s.Agent.Models, ", ")))
	}
	return req, nil
}

// randomHex is 16 random bytes in hex, for IDs.
func randomHex() string {
	b := make([]byte, 16)
	rand.Read(b) // never fails since Go 1.24
	return hex.EncodeToString(b)
}

func withDefaults(r RunRequest, d config.Agent) RunRequest {
	if r.Model == "" {
		r.Model = d.Model
	}
	if r.MaxSteps <= 0 {
		r.MaxSteps = d.MaxSteps
	}
	return r
}

// GetRun returns a run with its steps (viewer on its box).
func (s *Service) GetRun(ctx context.Context, caller, runID string) (Run, error) {
	run, err := s.run(ctx, caller, runID, cocoonbox.RoleViewer)
	if err != nil {
		return Run{}, err
	}
	steps, err := s.Store.AgentSteps(ctx, runID)
	if err != nil {
		return Run{}, fmt.Errorf("read run steps: %w", err)
	}
	r := s.withSteps(ctx, run, steps)
	r.Steps = steps
	r.StepCosts = s.stepCosts(ctx, runID)
	if rec, err := s.Store.RecordingOfRun(ctx, runID); err == nil {
		r.Recording = &rec
	} else if !errors.Is(err, store.ErrNotFound) && s.Logger != nil {
		s.Logger.Warn("read the run's recording", "run", runID, "err", err)
	}
	return r, nil
}

// stepCosts is what each of the run's steps used and cost; nil, logged, when the ledger cannot
// be read (the run itself was).
func (s *Service) stepCosts(ctx context.Context, runID string) map[int]StepCost {
	use, err := s.Store.RunStepUsage(ctx, runID)
	if err != nil {
		if s.Logger != nil {
			s.Logger.Warn("read run usage by step", "run", runID, "err", err)
		}
		return nil
	}
	out := map[int]StepCost{}
	for _, u := range use {
		c := out[u.Step]
		c.Tokens += u.InputTokens + u.OutputTokens
		c.CostUSD += s.Agent.Prices[u.Model].Cost(u.InputTokens, u.CachedTokens, u.OutputTokens)
		out[u.Step] = c
	}
	return out
}

// StepImages returns the screenshots of a step of the run as small PNGs (viewer).
func (s *Service) StepImages(ctx context.Context, caller, runID string, step int) ([][]byte, error) {
	if step < 1 {
		return nil, cocoonbox.Invalid("step", fmt.Sprintf("must be a step's number, from 1; got %d", step))
	}
	if _, err := s.run(ctx, caller, runID, cocoonbox.RoleViewer); err != nil {
		return nil, err
	}
	imgs, err := s.Store.AgentStepImages(ctx, runID, step)
	if errors.Is(err, store.ErrNotFound) {
		return nil, cocoonbox.Errorf(cocoonbox.ENotFound, "run %s has no step %d", runID, step)
	}
	return imgs, err
}

// ListRuns returns the box's runs, newest first (viewer).
func (s *Service) ListRuns(ctx context.Context, caller string, id cocoonbox.BoxID) ([]Run, error) {
	if _, err := s.authorize(ctx, caller, id, cocoonbox.RoleViewer); err != nil {
		return nil, err
	}
	rows, err := s.Store.ListAgentRuns(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	runs := make([]Run, 0, len(rows))
	for _, r := range rows {
		runs = append(runs, Run{AgentRun: r})
	}
	return runs, nil
}

// CancelRun stops a run (driver); its steps so far are kept. Cancelling an ended run answers it
// as it ended.
func (s *Service) CancelRun(ctx context.Context, caller, runID string) (Run, error) {
	run, err := s.run(ctx, caller, runID, cocoonbox.RoleDriver)
	if err != nil {
		return Run{}, err
	}
	if !run.EndedAt.IsZero() {
		return Run{AgentRun: run}, nil
	}
	err = workflows.CancelRun(ctx, s.Temporal, runID, caller)
	if err != nil && !errors.Is(err, workflows.ErrRunEnded) { // ended meanwhile: nothing to cancel
		return Run{}, err
	}
	s.audit(ctx, caller, run.BoxID, "agent.cancel", map[string]any{"run": runID})
	return Run{AgentRun: run}, nil
}

// CancelRunsOf tells every run of user owner that has not ended to stop, as disabling the user
// does, and returns how many it told; by, the admin, is named in the runs' events.
func (s *Service) CancelRunsOf(ctx context.Context, owner, by string) (int, error) {
	ids, err := s.Store.OpenRunsOf(ctx, owner)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		err := workflows.CancelRun(ctx, s.Temporal, id, by)
		switch {
		case errors.Is(err, workflows.ErrRunEnded): // ended meanwhile
		case err != nil:
			return n, fmt.Errorf("cancel run %s: %w", id, err)
		default:
			n++
		}
	}
	return n, nil
}

// SendMessage tells a running agent something (driver); its next step reads it.
func (s *Service) SendMessage(ctx context.Context, caller, runID, text string) error {
	switch {
	case strings.TrimSpace(text) == "":
		return cocoonbox.Invalid("text", "is required")
	case len(text) > maxTaskBytes:
		return cocoonbox.Invalid("text", fmt.Sprintf("is longer than %d bytes", maxTaskBytes))
	}
	run, err := s.run(ctx, caller, runID, cocoonbox.RoleDriver)
	if err != nil {
		return err
	}
	notRunning := cocoonbox.Errorf(cocoonbox.EConflict, "run %s is %s", runID, run.State)
	if !run.EndedAt.IsZero() {
		return notRunning
	}
	err = workflows.MessageRun(ctx, s.Temporal, runID, text)
	switch {
	case errors.Is(err, workflows.ErrRunEnded):
		return notRunning
	case err != nil:
		return err
	}
	s.audit(ctx, caller, run.BoxID, "agent.message", map[string]any{"run": runID})
	return nil
}

// run loads a run the caller may act on with need on its box; a run on a box the caller cannot
// see reads as not found.
func (s *Service) run(ctx context.Context, caller, runID string, need cocoonbox.Role) (store.AgentRun, error) {
	notFound := cocoonbox.Errorf(cocoonbox.ENotFound, "run %s not found", runID)
	if runID == "" {
		return store.AgentRun{}, cocoonbox.Invalid("run_id", "is required")
	}
	run, err := s.Store.AgentRunByID(ctx, runID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.AgentRun{}, notFound
	case err != nil:
		return store.AgentRun{}, fmt.Errorf("read run %s: %w", runID, err)
	}
	if _, err := s.authorize(ctx, caller, run.BoxID, need); err != nil {
		if cocoonbox.ErrorCode(err) == cocoonbox.ENotFound {
			return store.AgentRun{}, notFound
		}
		return store.AgentRun{}, err
	}
	return run, nil
}
