package activities

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/agentvmtest"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/boxlink/boxlinktest"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

const agentBox = cocoonbox.BoxID("bx_0123456789abcdef")

// agentCred is agentBox's agent credential under testCreds' key.
var agentCred = boxlink.Credential([]byte("key"), agentBox)

// testCreds derives agent credentials under a fixed key.
func testCreds(id cocoonbox.BoxID) (string, error) { return boxlink.Credential([]byte("key"), id), nil }

func TestAgentErrorMapping(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err       error
		typ       string
		retryable bool
	}{
		{status.Error(codes.InvalidArgument, "model: 400 no such model"), ErrTypeInvalidArgument, false},
		{status.Error(codes.FailedPrecondition, "x"), ErrTypeConflict, false},
		{status.Error(codes.Unimplemented, "x"), ErrTypeInvalidArgument, false},
		{status.Error(codes.Unavailable, "connection refused"), ErrTypeUnavailable, true},
		{status.Error(codes.Unauthenticated, "no credential yet"), ErrTypeUnavailable, true},
		{status.Error(codes.ResourceExhausted, `"/home/user/x": the box's disk is full`), ErrTypeResourceExhausted, false},
		{status.Error(codes.Internal, "boom"), ErrTypeInternal, true},
		{sandbox.ErrNotFound, ErrTypeUnavailable, true}, // the next try's wake brings a sandbox
		{sandbox.ErrUnavailable, ErrTypeUnavailable, true},
	} {
		err := agentError(ctx, tc.err)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != tc.typ || app.NonRetryable() == tc.retryable {
			t.Errorf("%v: got %v", tc.err, err)
		}
	}
	if err := agentError(ctx, status.Error(codes.InvalidArgument, "model: 400 no such model")); !strings.Contains(err.Error(), "no such model") {
		t.Errorf("the model's message is lost: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := agentError(cctx, status.Error(codes.Canceled, "x")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// sbRef is the sandbox fakeTokens names as agentBox's.
var sbRef = sandbox.SandboxRef{ID: "sb_1", Token: "tok"}

// echoStep answers a step with the conversation so far plus the step's number, one shell call,
// and the run done at step 2.
func echoStep(_ context.Context, req *agentvmv1.StepRequest) (*agentvmv1.StepResponse, error) {
	return &agentvmv1.StepResponse{
		Messages:  append(append([]byte{}, req.GetMessages()...), byte('0'+req.GetStep())),
		Done:      req.GetStep() == 2,
		Text:      "step text\nmore",
		ToolCalls: []*agentvmv1.ToolCallResult{{Name: "shell", Result: "ok"}},
	}, nil
}

type fakeTokens struct{}

func (fakeTokens) PutSandboxToken(context.Context, string, sandbox.SandboxRef) error { return nil }
func (fakeTokens) SandboxToken(context.Context, string) (sandbox.SandboxRef, error) {
	return sandbox.SandboxRef{ID: "sb_1", Token: "tok"}, nil
}

// fakeRuns is a database in which every run is usr_a's with model m on agentBox, which usr_a
// owns; the refusals are tested against the real store (agentauth_test.go).
type fakeRuns struct {
	steps map[int]store.NewAgentStep
}

func (f *fakeRuns) AgentRunByID(_ context.Context, id string) (store.AgentRun, error) {
	return store.AgentRun{AgentRun: cocoonbox.AgentRun{ID: id, BoxID: agentBox, Owner: "usr_a", Model: "m"}}, nil
}
func (f *fakeRuns) BoxByID(_ context.Context, id cocoonbox.BoxID) (store.Box, error) {
	return store.Box{Box: cocoonbox.Box{ID: id, Owner: "usr_a"}}, nil
}
func (f *fakeRuns) ShareRole(context.Context, cocoonbox.BoxID, string) (cocoonbox.Role, error) {
	return "", store.ErrNotFound
}

func (f *fakeRuns) SetAgentRunState(context.Context, string, cocoonbox.AgentRunState, string) error {
	return nil
}
func (f *fakeRuns) AppendEvent(context.Context, store.Event) error { return nil }
func (f *fakeRuns) AppendAgentStep(_ context.Context, s store.NewAgentStep) error {
	f.steps[s.Step] = s
	return nil
}
func (f *fakeRuns) AgentConversation(_ context.Context, _ string, step int) ([]byte, error) {
	s, ok := f.steps[step]
	if !ok {
		return nil, store.ErrNotFound
	}
	return s.Conversation, nil
}

type fakeVault map[string]string

func (v fakeVault) Open(_ context.Context, owner, name string) (string, error) {
	if s, ok := v[owner+"/"+name]; ok {
		return s, nil
	}
	return "", store.ErrNotFound
}

// newAgentFixture is an Agent activity whose box sbRef holds a fake agent, current and
// answering echoStep, that takes agentBox's credential.
func newAgentFixture(t *testing.T) (*Agent, *agentvmtest.Agent, *boxlinktest.Box, *fakeRuns) {
	t.Helper()
	agent := agentvmtest.New(t, agentvmtest.Options{Credential: agentCred, Version: boxlink.MinAgentVersion, Step: echoStep})
	box := boxlinktest.New(agent, sbRef)
	runs := &fakeRuns{steps: map[int]store.NewAgentStep{}}
	woke := 0
	a := &Agent{
		Link: &boxlink.Link{Sandbox: box, Tokens: fakeTokens{}, Credentials: testCreds}, Runs: runs, Vault: fakeVault{"usr_a/OPENAI_KEY": "sk-secret"},
		Gateway: func() Gateway {
			return Gateway{Provider: ProviderOpenAI, BaseURL: "http://gw.test/v1", KeySecret: "OPENAI_KEY"}
		},
		Wake: func(context.Context, cocoonbox.BoxID) (BoxLease, error) { woke++; return BoxLease{}, nil },
	}
	return a, agent, box, runs
}

func TestAgentStep(t *testing.T) {
	ctx := context.Background()
	a, agent, box, runs := newAgentFixture(t)
	in := StepInput{RunID: "run_1", BoxID: agentBox, Owner: "usr_a", Step: 1, Model: "m", Task: "do it"}
	res, err := a.Step(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Done || res.ToolCalls != 1 || res.Text != "step text\nmore" {
		t.Fatalf("step 1 = %+v", res)
	}
	in.Step, in.Message = 2, "hurry"
	// A person took the desktop between the steps: the agent is told so.
	a.Wake = func(context.Context, cocoonbox.BoxID) (BoxLease, error) {
		return BoxLease{Controller: "usr_b", Seq: 3}, nil
	}
	if res, err = a.Step(ctx, in); err != nil || !res.Done {
		t.Fatalf("step 2 = %+v, %v", res, err)
	}
	reqs := agent.Steps()
	if len(reqs) != 2 {
		t.Fatalf("agent saw %d steps", len(reqs))
	}
	r1, r2 := reqs[0], reqs[1]
	if r1.GetRunId() != "run_1" || len(r1.GetMessages()) != 0 || r1.GetTask() != "do it" ||
		r1.GetProvider() != "openai" || r1.GetBaseUrl() != "http://"+boxGatewayHost+"/v1" {
		t.Errorf("step 1 request %v", r1)
	}
	if strings.Contains(r1.String(), "sk-secret") || strings.Contains(r1.String(), "gw.test") {
		t.Errorf("step 1 request carries the key or the gateway: %v", r1)
	}
	if r2.GetLeaseSeq() != 3 {
		t.Errorf("step 2's lease sequence %d, want the box's 3", r2.GetLeaseSeq())
	}
	if r1.GetDesktopInputRefused() || !r2.GetDesktopInputRefused() {
		t.Errorf("desktop input refused: step 1 %v, step 2 %v; want false, then true while usr_b controls", r1.GetDesktopInputRefused(), r2.GetDesktopInputRefused())
	}
	if string(r2.GetMessages()) != "1" || r2.GetMessage() != "hurry" {
		t.Errorf("step 2 request carries conversation %q, message %q", r2.GetMessages(), r2.GetMessage())
	}
	if execs := box.Execs(); len(execs) != 1 || execs[0].Env["COCOONBOX_CRED"] != agentCred || strings.Contains(strings.Join(execs[0].Argv, " "), agentCred) {
		t.Errorf("credential writes %+v", execs)
	}
	s := runs.steps[2]
	if s.Kind != "model_turn" || s.Summary != "called shell" || string(s.Conversation) != "12" ||
		strings.Contains(string(s.Payload), "sk-secret") || !strings.Contains(string(s.Payload), `"message":"hurry"`) {
		t.Errorf("step 2 row %+v payload %s", s, s.Payload)
	}
	if n := agent.Calls(agentvmtest.MethodInfo); n != 1 {
		t.Errorf("asked the agent its version %d times for two steps in one sandbox, want 1", n)
	}
}

// TestAgentStepRefusesAnOldAgent: a box whose agent predates the protocol agent runs rely on
// (its image is older) is refused before any step reaches it, with both versions named.
func TestAgentStepRefusesAnOldAgent(t *testing.T) {
	in := StepInput{RunID: "run_1", BoxID: agentBox, Owner: "usr_a", Step: 1, Model: "m", Task: "do it"}
	for _, v := range []string{"0.6.0", "0.5.9", "", "dev"} {
		a, agent, _, _ := newAgentFixture(t)
		agent.SetVersion(v)
		_, err := a.Step(t.Context(), in)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != ErrTypeConflict || !app.NonRetryable() ||
			!strings.Contains(err.Error(), fmt.Sprintf("%q", v)) || !strings.Contains(err.Error(), boxlink.MinAgentVersion) {
			t.Errorf("agent %q: %v, want a non-retryable conflict naming both versions", v, err)
		}
		if n := len(agent.Steps()); n != 0 {
			t.Errorf("agent %q was sent %d steps", v, n)
		}
	}
	for _, v := range []string{boxlink.MinAgentVersion, "0.10.0", "1.0.0"} {
		a, agent, _, _ := newAgentFixture(t)
		agent.SetVersion(v)
		if _, err := a.Step(t.Context(), in); err != nil {
			t.Errorf("agent %q: %v", v, err)
		}
	}
}

func TestAgentStepErrors(t *testing.T) {
	ctx := context.Background()
	a, agent, _, _ := newAgentFixture(t)
	in := StepInput{RunID: "run_1", BoxID: agentBox, Owner: "usr_a", Step: 1, Model: "m"}
	gateway := a.Gateway
	a.Gateway = func() Gateway { g := gateway(); g.KeySecret = "NOPE"; return g }
	var app *temporal.ApplicationError
	if _, err := a.Step(ctx, in); !errors.As(err, &app) || app.Type() != ErrTypeInvalidArgument || !strings.Contains(err.Error(), "NOPE") {
		t.Errorf("missing key secret: %v", err)
	}
	a.Gateway = func() Gateway { g := gateway(); g.BaseURL = "file:///etc/passwd"; return g }
	if _, err := a.Step(ctx, in); !errors.As(err, &app) || app.Type() != ErrTypeInvalidArgument || !strings.Contains(err.Error(), "base_url") {
		t.Errorf("bad gateway base URL: %v", err)
	}
	a.Gateway = gateway
	agent.FailNext(agentvmtest.MethodStep, 1, codes.InvalidArgument, "model: 401 invalid api key")
	if _, err := a.Step(ctx, in); !errors.As(err, &app) || !app.NonRetryable() || !strings.Contains(err.Error(), "invalid api key") {
		t.Errorf("model 4xx: %v", err)
	}
	in.Step = 3 // step 2 was never recorded
	if _, err := a.Step(ctx, in); !errors.As(err, &app) || app.Type() != ErrTypeNotFound {
		t.Errorf("missing conversation: %v", err)
	}
	a.Link.Credentials = func(cocoonbox.BoxID) (string, error) { return "wrong", nil }
	in.Step = 1
	if _, err := a.Step(ctx, in); !errors.As(err, &app) || app.Type() != ErrTypeUnavailable || app.NonRetryable() {
		t.Errorf("refused credential: %v", err)
	}
}

// TestAgentCancelStep: CancelStep reaches the box's agent with the credential and names the run.
func TestAgentCancelStep(t *testing.T) {
	a, agent, _, _ := newAgentFixture(t)
	if err := a.CancelStep(context.Background(), CancelStepInput{RunID: "run_1", BoxID: agentBox}); err != nil {
		t.Fatal(err)
	}
	if got := agent.Cancels(); len(got) != 1 || got[0] != "run_1" {
		t.Fatalf("cancel calls: %v, want run_1 once", got)
	}
}

// TestThumbnails: of the thumbnails a box's step answer carries, only PNGs within the bounds are
// kept, at most maxStepImages: anything else is the box's word and dropped.
func TestThumbnails(t *testing.T) {
	var small, wide bytes.Buffer
	if err := png.Encode(&small, image.NewRGBA(image.Rect(0, 0, 320, 200))); err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(&wide, image.NewRGBA(image.Rect(0, 0, maxStepImageSide+1, 10))); err != nil {
		t.Fatal(err)
	}
	resp := &agentvmv1.StepResponse{ToolCalls: []*agentvmv1.ToolCallResult{
		{Thumbnails: [][]byte{small.Bytes(), []byte("<svg onload=alert(1)>"), wide.Bytes()}},
		{Thumbnails: [][]byte{append(bytes.Clone(small.Bytes()), make([]byte, maxStepImageBytes)...)}},
		{Thumbnails: [][]byte{small.Bytes(), small.Bytes(), small.Bytes(), small.Bytes()}},
	}}
	got := thumbnails(resp)
	if len(got) != maxStepImages {
		t.Fatalf("kept %d thumbnails; want %d", len(got), maxStepImages)
	}
	for i, b := range got {
		if !bytes.Equal(b, small.Bytes()) {
			t.Fatalf("thumbnail %d is not the small PNG", i)
		}
	}
}
