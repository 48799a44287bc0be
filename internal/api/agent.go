package api

import (
	"context"

	"github.com/loomhand/cocoonbox/internal/boxsvc"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// agentService gives tasks to boxes' resident agents through boxsvc, which checks the caller's
// role on the box: runs need driver, reading them viewer.
type agentService struct {
	cbv1.UnimplementedAgentServiceServer
	s *Server
}

// StartRun gives the box's agent a task (driver).
func (a *agentService) StartRun(ctx context.Context, req *cbv1.StartRunRequest) (*cbv1.AgentRun, error) {
	svc, caller, id, err := a.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	run, err := svc.StartRun(ctx, caller, id, boxsvc.RunRequest{Task: req.GetTask(), Model: req.GetModel(), MaxSteps: int(req.GetMaxSteps()), MaxTokens: req.GetMaxTokens(), Record: req.GetRecord()})
	if err != nil {
		return nil, err
	}
	return runProto(run), nil
}

// ListRuns lists the box's runs, newest first (viewer).
func (a *agentService) ListRuns(ctx context.Context, req *cbv1.ListRunsRequest) (*cbv1.ListRunsResponse, error) {
	svc, caller, id, err := a.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	runs, err := svc.ListRuns(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	resp := &cbv1.ListRunsResponse{Runs: make([]*cbv1.AgentRun, 0, len(runs))}
	for _, r := range runs {
		resp.Runs = append(resp.Runs, runProto(r))
	}
	return resp, nil
}

// SendMessage tells a running agent something (driver).
func (a *agentService) SendMessage(ctx context.Context, req *cbv1.SendMessageRequest) (*cbv1.SendMessageResponse, error) {
	svc, caller, err := a.s.boxCaller(ctx)
	if err != nil {
		return nil, err
	}
	if err := svc.SendMessage(ctx, caller, req.GetRunId(), req.GetText()); err != nil {
		return nil, err
	}
	return &cbv1.SendMessageResponse{}, nil
}

// CancelRun stops a run (driver).
func (a *agentService) CancelRun(ctx context.Context, req *cbv1.CancelRunRequest) (*cbv1.AgentRun, error) {
	svc, caller, err := a.s.boxCaller(ctx)
	if err != nil {
		return nil, err
	}
	run, err := svc.CancelRun(ctx, caller, req.GetRunId())
	if err != nil {
		return nil, err
	}
	return runProto(run), nil
}

// GetRun returns a run with its steps (viewer).
func (a *agentService) GetRun(ctx context.Context, req *cbv1.GetRunRequest) (*cbv1.AgentRun, error) {
	svc, caller, err := a.s.boxCaller(ctx)
	if err != nil {
		return nil, err
	}
	run, err := svc.GetRun(ctx, caller, req.GetRunId())
	if err != nil {
		return nil, err
	}
	return runProto(run), nil
}

// GetStepImages returns a step's screenshots as small PNGs (viewer).
func (a *agentService) GetStepImages(ctx context.Context, req *cbv1.GetStepImagesRequest) (*cbv1.GetStepImagesResponse, error) {
	svc, caller, err := a.s.boxCaller(ctx)
	if err != nil {
		return nil, err
	}
	imgs, err := svc.StepImages(ctx, caller, req.GetRunId(), int(req.GetStep()))
	if err != nil {
		return nil, err
	}
	return &cbv1.GetStepImagesResponse{Images: imgs}, nil
}

// WatchRun streams a run's steps and state changes until it ends (viewer).
func (a *agentService) WatchRun(req *cbv1.WatchRunRequest, stream cbv1.AgentService_WatchRunServer) error {
	ctx := stream.Context()
	svc, caller, err := a.s.boxCaller(ctx)
	if err != nil {
		return err
	}
	return svc.WatchRun(ctx, caller, req.GetRunId(), func(e boxsvc.RunEvent) error {
		return stream.Send(runEventProto(e))
	})
}
