package main

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// fakeAgent is the fake API's AgentService: canned runs, each with the events WatchRun plays
// for it. A task naming "break" starts a run that fails, "hang" one that never ends (its watch
// sends its steps and then waits for the client to go), anything else one that succeeds.
type fakeAgent struct {
	cbv1.UnimplementedAgentServiceServer
	f *fakeAPI
	// watching is told when run_live's watch has sent its steps.
	watching chan struct{}
}

func (f *fakeAPI) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	md, _ := metadata.FromIncomingContext(ss.Context())
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+fakeToken {
		return status.Error(codes.Unauthenticated, "invalid or revoked token")
	}
	return h(srv, ss)
}

func sampleSteps() []*cbv1.AgentStep {
	return []*cbv1.AgentStep{
		{Number: 1, Kind: "model_turn", Summary: "called shell, screenshot", Text: "Let me look.", Message: "the site is example.test",
			At:        timestamppb.New(t0.Add(time.Minute)),
			ToolCalls: []*cbv1.AgentToolCall{{Name: "shell", IsError: true, Result: "curl: (7) Failed to connect\nmore"}, {Name: "screenshot", Images: 1}}},
		{Number: 2, Kind: "model_turn", Summary: "called shell", At: timestamppb.New(t0.Add(2 * time.Minute)),
			ToolCalls: []*cbv1.AgentToolCall{{Name: "shell", Result: "active"}}},
		{Number: 3, Kind: "model_turn", Summary: "The site was down; I restarted nginx.", Done: true, StopReason: "end_turn",
			Text: "The site was down; I restarted nginx.\nIt answers 200 now.", At: timestamppb.New(t0.Add(3 * time.Minute))},
	}
}

func sampleRuns() map[string]*cbv1.AgentRun {
	run := func(id, state, task string) *cbv1.AgentRun {
		r := &cbv1.AgentRun{Id: id, BoxId: "bx_00000000000000a1", Owner: "us_ann", Model: "gpt-x", Provider: "openai",
			State: state, Task: task, CreatedAt: timestamppb.New(t0)}
		if state != "running" && state != "waiting" {
			r.EndedAt = timestamppb.New(t0.Add(4 * time.Minute))
		}
		return r
	}
	ok := run("run_ok", "succeeded", "fix the site")
	ok.StepsDone, ok.Result, ok.Steps = 3, sampleSteps()[2].GetText(), sampleSteps()
	ok.MaxTokens, ok.TokensUsed = 20000, 12920
	ok.Plan = []*cbv1.PlanItem{{Text: "find why the site is down", Status: "done"}, {Text: "restart nginx", Status: "done"},
		{Text: "check it answers", Status: "skipped"}}
	bad := run("run_bad", "failed", "break it")
	bad.StepsDone, bad.Error = 1, "model: 400 the context is too long"
	bad.Steps = sampleSteps()[:1]
	bad.Steps[0].Done = false
	live := run("run_live", "running", "hang around")
	live.StepsDone, live.Steps = 1, sampleSteps()[:1]
	return map[string]*cbv1.AgentRun{"run_ok": ok, "run_bad": bad, "run_live": live}
}

func (a *fakeAgent) run(id string) (*cbv1.AgentRun, error) {
	r, ok := sampleRuns()[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "run %s not found", id)
	}
	return r, nil
}

// brief is the run without its steps, as StartRun, ListRuns and WatchRun's run events carry it.
func brief(r *cbv1.AgentRun) *cbv1.AgentRun {
	r = proto.Clone(r).(*cbv1.AgentRun)
	r.Steps = nil
	return r
}

func (a *fakeAgent) StartRun(_ context.Context, r *cbv1.StartRunRequest) (*cbv1.AgentRun, error) {
	if _, err := a.f.find(r.GetBox()); err != nil {
		return nil, err
	}
	if r.GetModel() == "nope" {
		return nil, status.Errorf(codes.InvalidArgument, "model: %q is not offered here", r.GetModel())
	}
	id := "run_ok"
	switch {
	case strings.Contains(r.GetTask(), "break"):
		id = "run_bad"
	case strings.Contains(r.GetTask(), "hang"):
		id = "run_live"
	}
	run := brief(sampleRuns()[id])
	run.State, run.EndedAt, run.StepsDone, run.Result, run.Error = "running", nil, 0, "", ""
	return run, nil
}

func (a *fakeAgent) GetRun(_ context.Context, r *cbv1.GetRunRequest) (*cbv1.AgentRun, error) {
	return a.run(r.GetRunId())
}

func (a *fakeAgent) ListRuns(_ context.Context, r *cbv1.ListRunsRequest) (*cbv1.ListRunsResponse, error) {
	b, err := a.f.find(r.GetBox())
	if err != nil {
		return nil, err
	}
	resp := &cbv1.ListRunsResponse{}
	if b.GetName() == "web" {
		runs := sampleRuns()
		for _, id := range []string{"run_live", "run_bad", "run_ok"} {
			run := brief(runs[id])
			run.StepsDone, run.Result = 0, ""
			resp.Runs = append(resp.Runs, run)
		}
	}
	return resp, nil
}

func (a *fakeAgent) CancelRun(_ context.Context, r *cbv1.CancelRunRequest) (*cbv1.AgentRun, error) {
	run, err := a.run(r.GetRunId())
	if err != nil {
		return nil, err
	}
	return brief(run), nil
}

func (a *fakeAgent) SendMessage(_ context.Context, r *cbv1.SendMessageRequest) (*cbv1.SendMessageResponse, error) {
	run, err := a.run(r.GetRunId())
	if err != nil {
		return nil, err
	}
	if run.GetEndedAt() != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "run %s is %s", run.GetId(), run.GetState())
	}
	return &cbv1.SendMessageResponse{}, nil
}

// WatchRun plays the run's steps and final state as the real service would: steps, the run,
// and for run_ok a spell of waiting for a person before its last step.
func (a *fakeAgent) WatchRun(r *cbv1.WatchRunRequest, stream cbv1.AgentService_WatchRunServer) error {
	a.f.mu.Lock()
	a.f.reqs["WatchRun"] = r
	a.f.mu.Unlock()
	run, err := a.run(r.GetRunId())
	if err != nil {
		return err
	}
	send := func(e *cbv1.WatchRunEvent) error { return stream.Send(e) }
	step := func(s *cbv1.AgentStep) error {
		return send(&cbv1.WatchRunEvent{Event: &cbv1.WatchRunEvent_Step{Step: s}})
	}
	state := func(r *cbv1.AgentRun) error {
		return send(&cbv1.WatchRunEvent{Event: &cbv1.WatchRunEvent_Run{Run: brief(r)}})
	}
	steps := run.GetSteps()
	switch run.GetId() {
	case "run_ok":
		running := brief(run)
		running.State, running.EndedAt, running.StepsDone, running.Result = "running", nil, 1, "Let me look."
		waiting := proto.Clone(running).(*cbv1.AgentRun)
		waiting.State = "waiting"
		asking := proto.Clone(running).(*cbv1.AgentRun)
		asking.State, asking.Question = "waiting_for_user", "Which site?"
		text := func(s string) func() error {
			return func() error {
				return send(&cbv1.WatchRunEvent{Event: &cbv1.WatchRunEvent_Text{Text: &cbv1.AgentText{Step: 3, Text: s}}})
			}
		}
		for _, f := range []func() error{
			func() error { return step(steps[0]) }, func() error { return state(running) },
			func() error { return state(waiting) }, func() error { return state(running) },
			func() error { return state(asking) }, func() error { return state(running) },
			func() error { return step(steps[1]) }, text("The page "), text("says\nhello\x1b[2J."),
			func() error { return step(steps[2]) }, func() error { return state(run) },
		} {
			if err := f(); err != nil {
				return err
			}
		}
		return nil
	case "run_live":
		if err := step(steps[0]); err != nil {
			return err
		}
		if err := state(run); err != nil {
			return err
		}
		a.watching <- struct{}{}
		<-stream.Context().Done()
		return nil
	}
	for _, s := range steps {
		if err := step(s); err != nil {
			return err
		}
	}
	return state(run)
}
