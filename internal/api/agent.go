package api

import (
	"context"

	"github.com/loomhand/cocoonbox"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// agentService answers AgentService until the resident agent exists. Calls that name a box check
// the caller's role on it first, so a stranger sees not found and a viewer is refused a run,
// exactly as they will be once runs are served.
type agentService struct {
	cbv1.UnimplementedAgentServiceServer
	s *Server
}

// errAgent is every AgentService answer for now.
var errAgent = cocoonbox.Errorf(cocoonbox.EUnimplemented, "agent runs land with the resident agent")

func (a *agentService) boxRole(ctx context.Context, ref string, need cocoonbox.Role) error {
	svc, caller, id, err := a.s.resolveBox(ctx, ref)
	if err != nil {
		return err
	}
	if err := requireRole(ctx, svc, caller, id, need); err != nil {
		return err
	}
	return errAgent
}

// StartRun will give the box's agent a task (driver).
func (a *agentService) StartRun(ctx context.Context, req *cbv1.StartRunRequest) (*cbv1.AgentRun, error) {
	return nil, a.boxRole(ctx, req.GetBox(), cocoonbox.RoleDriver)
}

// ListRuns will list the box's runs (viewer).
func (a *agentService) ListRuns(ctx context.Context, req *cbv1.ListRunsRequest) (*cbv1.ListRunsResponse, error) {
	return nil, a.boxRole(ctx, req.GetBox(), cocoonbox.RoleViewer)
}

// SendMessage will tell a running agent something.
func (a *agentService) SendMessage(context.Context, *cbv1.SendMessageRequest) (*cbv1.SendMessageResponse, error) {
	return nil, errAgent
}

// CancelRun will stop a run.
func (a *agentService) CancelRun(context.Context, *cbv1.CancelRunRequest) (*cbv1.AgentRun, error) {
	return nil, errAgent
}

// GetRun will return a run with its steps.
func (a *agentService) GetRun(context.Context, *cbv1.GetRunRequest) (*cbv1.AgentRun, error) {
	return nil, errAgent
}

// WatchRun will stream a run.
func (a *agentService) WatchRun(*cbv1.WatchRunRequest, cbv1.AgentService_WatchRunServer) error {
	return errAgent
}
