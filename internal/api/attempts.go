package api

import (
	"context"

	"github.com/loomhand/cocoonbox/internal/boxsvc"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// StartAttempts runs a task best-of-N on forks of the box (admin).
func (a *agentService) StartAttempts(ctx context.Context, req *cbv1.StartAttemptsRequest) (*cbv1.Attempts, error) {
	svc, caller, id, err := a.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	if ctx, err = withRequest(ctx, req.GetRequestId()); err != nil {
		return nil, err
	}
	v, err := svc.StartAttempts(ctx, caller, id, boxsvc.RunRequest{Task: req.GetTask(), Model: req.GetModel(), MaxSteps: int(req.GetMaxSteps())}, int(req.GetAttempts()))
	if err != nil {
		return nil, err
	}
	return attemptsProto(v), nil
}

// GetAttempts returns a best-of-N run (viewer).
func (a *agentService) GetAttempts(ctx context.Context, req *cbv1.GetAttemptsRequest) (*cbv1.Attempts, error) {
	return a.onAttempts(ctx, func(svc *boxsvc.Service, caller string) (boxsvc.AttemptsView, error) {
		return svc.GetAttempts(ctx, caller, req.GetId())
	})
}

// AcceptAttempts gives the box the chosen attempt's state (admin).
func (a *agentService) AcceptAttempts(ctx context.Context, req *cbv1.AcceptAttemptsRequest) (*cbv1.Attempts, error) {
	return a.onAttempts(ctx, func(svc *boxsvc.Service, caller string) (boxsvc.AttemptsView, error) {
		return svc.AcceptAttempts(ctx, caller, req.GetId(), int(req.GetChoice()))
	})
}

// DiscardAttempts deletes the attempts' forks (admin).
func (a *agentService) DiscardAttempts(ctx context.Context, req *cbv1.DiscardAttemptsRequest) (*cbv1.Attempts, error) {
	return a.onAttempts(ctx, func(svc *boxsvc.Service, caller string) (boxsvc.AttemptsView, error) {
		return svc.DiscardAttempts(ctx, caller, req.GetId())
	})
}

func (a *agentService) onAttempts(ctx context.Context, call func(*boxsvc.Service, string) (boxsvc.AttemptsView, error)) (*cbv1.Attempts, error) {
	svc, caller, err := a.s.boxCaller(ctx)
	if err != nil {
		return nil, err
	}
	v, err := call(svc, caller)
	if err != nil {
		return nil, err
	}
	return attemptsProto(v), nil
}

func attemptsProto(v boxsvc.AttemptsView) *cbv1.Attempts {
	out := &cbv1.Attempts{
		Id: v.ID, BoxId: string(v.BoxID), Task: v.Task, Model: v.Model, State: v.State,
		Winner: int32(v.Winner), Reason: v.Reason, Chosen: int32(v.Chosen), Error: v.Error, CreatedAt: ts(v.Created),
	}
	for i, f := range v.Forks {
		at := &cbv1.Attempt{Number: int32(i + 1), BoxId: string(f), RunId: v.Runs[i]}
		if i < len(v.RunStates) {
			at.State, at.Result = string(v.RunStates[i]), v.Results[i]
		}
		out.Attempts = append(out.Attempts, at)
	}
	return out
}
