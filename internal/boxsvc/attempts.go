package boxsvc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// AttemptsView is a best-of-N run with each attempt's run as it stands.
type AttemptsView struct {
	store.Attempts
	RunStates []cocoonbox.AgentRunState
	Results   []string // what each attempt's agent said last
}

// StartAttempts runs a task best-of-N on box id (admin: it forks the box): the box is forked n
// ways, the task runs on each fork as its own run, then a judge picks one; nothing changes on
// the box until the pick is accepted (AcceptAttempts). The forks and their runs count toward
// the caller's quotas.
func (s *Service) StartAttempts(ctx context.Context, caller string, id cocoonbox.BoxID, req RunRequest, n int) (AttemptsView, error) {
	if n < 2 || n > workflows.MaxForks {
		return AttemptsView{}, cocoonbox.Invalid("attempts", fmt.Sprintf("must be from 2 to %d, got %d", workflows.MaxForks, n))
	}
	if _, err := s.authorize(ctx, caller, id, cocoonbox.RoleAdmin); err != nil {
		return AttemptsView{}, err
	}
	req, err := s.checkRun(req)
	if err != nil {
		return AttemptsView{}, err
	}
	forked, err := s.Fork(ctx, caller, id, ForkRequest{Count: n})
	if err != nil {
		s.dropForks(ctx, caller, forked.Boxes)
		return AttemptsView{}, err
	}
	attID := workflows.AttemptsIDPrefix + requestHex(ctx, caller, "attempts/"+string(id))
	in := workflows.AttemptsInput{ID: attID, BoxID: id, Owner: caller, Task: req.Task, System: req.System, Model: req.Model, MaxSteps: req.MaxSteps}
	var runs []store.NewAgentRun
	for _, f := range forked.Boxes {
		runID := workflows.RunIDPrefix + requestHex(ctx, caller, "run/"+string(f.BoxID))
		runs = append(runs, store.NewAgentRun{ID: runID, BoxID: f.BoxID, Owner: caller,
			Task: req.Task, Provider: s.Agent.Provider, Model: req.Model, MaxTokens: req.MaxTokens})
		in.Forks, in.Runs = append(in.Forks, f.BoxID), append(in.Runs, runID)
	}
	// The runs and the attempts' row are written together inside the runs quota, or none is.
	att, err := s.Store.CreateAttemptsWithin(ctx, store.Attempts{ID: attID, BoxID: id, Owner: caller, Task: req.Task,
		Model: req.Model, Forks: in.Forks, Runs: in.Runs}, runs, s.Quota.Runs)
	if err != nil {
		s.dropForks(ctx, caller, forked.Boxes)
		return AttemptsView{}, err
	}
	if err := workflows.StartAttempts(ctx, s.Temporal, in); err != nil {
		s.unstarted(ctx, att)
		s.dropForks(ctx, caller, forked.Boxes)
		return AttemptsView{}, err
	}
	s.audit(ctx, caller, id, "agent.attempts", map[string]any{"attempts": attID, "forks": in.Forks, "model": req.Model})
	return s.attemptsView(ctx, att), nil
}

// requestHex is randomHex, or, for a request that has an ID, 16 bytes derived from it, the
// caller and what (so a request sent again names the same things: forks, attempts, runs).
func requestHex(ctx context.Context, caller, what string) string {
	req, _ := ctx.Value(requestIDKey{}).(string)
	if req == "" {
		return randomHex()
	}
	sum := sha256.Sum256([]byte(caller + "\x00" + what + "\x00" + req))
	return hex.EncodeToString(sum[:16])
}

// unstarted says on the rows of a best-of-N run whose workflow never started that it failed,
// rather than leave them running forever (counted in the runs quota).
func (s *Service) unstarted(ctx context.Context, att store.Attempts) {
	ctx = context.WithoutCancel(ctx)
	err := s.Store.SetAttemptsState(ctx, att.ID, cocoonbox.AttemptsFailed, 0, "could not start")
	for _, run := range att.Runs {
		err = errors.Join(err, s.Store.SetAgentRunState(ctx, run, cocoonbox.AgentRunFailed, "could not start"))
	}
	if err != nil && s.Logger != nil {
		s.Logger.Warn("record unstarted attempts", "attempts", att.ID, "err", err)
	}
}

// dropForks deletes the forks of a best-of-N run that could not start.
func (s *Service) dropForks(ctx context.Context, caller string, forks []View) {
	ctx = context.WithoutCancel(ctx)
	for _, f := range forks {
		if f.BoxID == "" {
			continue
		}
		if _, err := s.DeleteWith(ctx, caller, f.BoxID, workflows.DeleteInput{PurgeSnapshots: true}); err != nil && s.Logger != nil {
			s.Logger.Warn("delete a fork of attempts that did not start", "box", f.BoxID, "err", err)
		}
	}
}

// GetAttempts returns a best-of-N run (viewer on its box).
func (s *Service) GetAttempts(ctx context.Context, caller, attID string) (AttemptsView, error) {
	att, err := s.attempts(ctx, caller, attID, cocoonbox.RoleViewer)
	if err != nil {
		return AttemptsView{}, err
	}
	return s.attemptsView(ctx, att), nil
}

// AcceptAttempts gives the box the state of attempt choice (0: the judge's pick) and deletes
// every fork, once the judge has picked (admin); it returns once that is done.
func (s *Service) AcceptAttempts(ctx context.Context, caller, attID string, choice int) (AttemptsView, error) {
	return s.answerAttempts(ctx, caller, attID, workflows.UpdateAccept, workflows.AcceptInput{Choice: choice, By: s.who(ctx, caller)})
}

// DiscardAttempts deletes every fork of a judged best-of-N run, leaving its box as it was (admin).
func (s *Service) DiscardAttempts(ctx context.Context, caller, attID string) (AttemptsView, error) {
	return s.answerAttempts(ctx, caller, attID, workflows.UpdateDiscard, struct{}{})
}

func (s *Service) answerAttempts(ctx context.Context, caller, attID, name string, arg any) (AttemptsView, error) {
	att, err := s.attempts(ctx, caller, attID, cocoonbox.RoleAdmin)
	if err != nil {
		return AttemptsView{}, err
	}
	if _, err := workflows.AnswerAttempts(once(ctx, caller, name), s.Temporal, attID, name, arg); err != nil {
		return AttemptsView{}, err
	}
	s.audit(ctx, caller, att.BoxID, "agent.attempts."+name, map[string]any{"attempts": attID})
	return s.GetAttempts(ctx, caller, attID)
}

// attempts reads a best-of-N run the caller has role need on the box of; a stranger's reads as
// not found.
func (s *Service) attempts(ctx context.Context, caller, attID string, need cocoonbox.Role) (store.Attempts, error) {
	att, err := s.Store.AttemptsByID(ctx, attID)
	if err != nil {
		return store.Attempts{}, err
	}
	if _, err := s.authorize(ctx, caller, att.BoxID, need); err != nil {
		return store.Attempts{}, err
	}
	return att, nil
}

func (s *Service) attemptsView(ctx context.Context, att store.Attempts) AttemptsView {
	v := AttemptsView{Attempts: att}
	for _, runID := range att.Runs {
		state, result := cocoonbox.AgentRunState(""), ""
		if run, err := s.Store.AgentRunByID(ctx, runID); err == nil {
			state = run.State
			if steps, err := s.Store.AgentSteps(ctx, runID); err == nil {
				result = s.withSteps(ctx, run, steps).Result
			}
		}
		v.RunStates, v.Results = append(v.RunStates, state), append(v.Results, result)
	}
	return v
}
