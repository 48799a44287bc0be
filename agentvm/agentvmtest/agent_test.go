package agentvmtest_test

import (
	"bytes"
	"context"
	"image/png"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/agentvmtest"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

const cred = "box-credential"

// dial returns a connection to the agent and a context carrying bearer.
func dial(t *testing.T, a *agentvmtest.Agent, bearer string) (*grpc.ClientConn, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///agent",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return a.Dial(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+bearer)
}

// TestStepJournal: a step runs once; its retry is answered from the journal, replayed, with the
// same answer; a failed step records nothing and runs again when retried.
func TestStepJournal(t *testing.T) {
	runs := 0
	a := agentvmtest.New(t, agentvmtest.Options{Credential: cred,
		Step: func(_ context.Context, req *agentvmv1.StepRequest) (*agentvmv1.StepResponse, error) {
			runs++
			if req.GetTask() == "fail" && runs == 1 {
				return nil, status.Error(codes.Unavailable, "model: 503")
			}
			return &agentvmv1.StepResponse{Text: req.GetTask(), Messages: []byte{byte(runs)}}, nil
		}})
	conn, ctx := dial(t, a, cred)
	c := agentvmv1.NewAgentsClient(conn)

	first, err := c.Step(ctx, &agentvmv1.StepRequest{RunId: "run_1", Step: 1, Task: "look"})
	if err != nil || first.GetReplayed() || first.GetText() != "look" {
		t.Fatalf("first step: %v, %v", first, err)
	}
	again, err := c.Step(ctx, &agentvmv1.StepRequest{RunId: "run_1", Step: 1, Task: "something else"})
	if err != nil || !again.GetReplayed() || again.GetText() != "look" || !bytes.Equal(again.GetMessages(), first.GetMessages()) {
		t.Fatalf("retried step: %v, %v; want the first answer, replayed", again, err)
	}
	if runs != 1 {
		t.Fatalf("the step ran %d times, want once", runs)
	}
	if got := len(a.Steps()); got != 2 {
		t.Fatalf("agent saw %d step requests, want 2", got)
	}

	runs = 0
	if _, err := c.Step(ctx, &agentvmv1.StepRequest{RunId: "run_2", Step: 1, Task: "fail"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("failing step: %v", err)
	}
	if a.Recorded("run_2", 1) != nil {
		t.Fatal("a failed step was recorded")
	}
	if resp, err := c.Step(ctx, &agentvmv1.StepRequest{RunId: "run_2", Step: 1, Task: "fail"}); err != nil || resp.GetReplayed() {
		t.Fatalf("retry of a failed step: %v, %v; want it run", resp, err)
	}
	if _, err := c.Step(ctx, &agentvmv1.StepRequest{RunId: "run_2", Step: 0}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("step 0: %v, want invalid argument", err)
	}
}

// TestCancelStopsTheStep: Cancel stops a run's step in progress, whose caller gets CANCELED, and
// says whether one was running.
func TestCancelStopsTheStep(t *testing.T) {
	started := make(chan struct{})
	a := agentvmtest.New(t, agentvmtest.Options{Credential: cred,
		Step: func(ctx context.Context, _ *agentvmv1.StepRequest) (*agentvmv1.StepResponse, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		}})
	conn, ctx := dial(t, a, cred)
	c := agentvmv1.NewAgentsClient(conn)
	done := make(chan error, 1)
	go func() {
		_, err := c.Step(ctx, &agentvmv1.StepRequest{RunId: "run_1", Step: 1, Task: "wait"})
		done <- err
	}()
	<-started
	resp, err := c.Cancel(ctx, &agentvmv1.CancelRequest{RunId: "run_1"})
	if err != nil || !resp.GetCancelled() {
		t.Fatalf("cancel: %v, %v; want cancelled", resp, err)
	}
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled step: %v, want CANCELED", err)
	}
	if resp, err := c.Cancel(ctx, &agentvmv1.CancelRequest{RunId: "run_1"}); err != nil || resp.GetCancelled() {
		t.Fatalf("second cancel: %v, %v; want nothing to cancel", resp, err)
	}
	if got := a.Cancels(); len(got) != 2 || got[0] != "run_1" {
		t.Fatalf("cancels %v", got)
	}
}

// TestLeaseRule: the lease keeps the word of the highest sequence, from SetDesktopLease and from
// the steps that run; an older word is ignored, an unordered one applies until an ordered came.
func TestLeaseRule(t *testing.T) {
	a := agentvmtest.New(t, agentvmtest.Options{Credential: cred})
	conn, ctx := dial(t, a, cred)
	c := agentvmv1.NewAgentsClient(conn)
	set := func(held bool, seq int64) {
		t.Helper()
		if _, err := c.SetDesktopLease(ctx, &agentvmv1.SetDesktopLeaseRequest{Held: held, LeaseSeq: seq}); err != nil {
			t.Fatal(err)
		}
	}
	set(true, 0)
	if got := a.Lease(); got != (agentvmtest.Lease{Held: true}) {
		t.Fatalf("after an unordered take: %+v", got)
	}
	set(true, 5)
	set(false, 4) // older: ignored
	if got := a.Lease(); got != (agentvmtest.Lease{Held: true, Seq: 5}) {
		t.Fatalf("after an older hand-back: %+v, want held at 5", got)
	}
	// A step computed before the take-over does not undo it either.
	if _, err := c.Step(ctx, &agentvmv1.StepRequest{RunId: "run_1", Step: 1, Task: "t", LeaseSeq: 3}); err != nil {
		t.Fatal(err)
	}
	if got := a.Lease(); !got.Held || got.Seq != 5 {
		t.Fatalf("after an older step: %+v", got)
	}
	if _, err := c.Step(ctx, &agentvmv1.StepRequest{RunId: "run_1", Step: 2, Task: "t", LeaseSeq: 6}); err != nil {
		t.Fatal(err)
	}
	if got := a.Lease(); got != (agentvmtest.Lease{Held: false, Seq: 6}) {
		t.Fatalf("after a newer step: %+v, want free at 6", got)
	}
}

// TestFaultsAndCredential: FailNext fails exactly the next n calls of the method with the code
// and message; a wrong or missing credential is UNAUTHENTICATED before any fault is spent; the
// version is configurable.
func TestFaultsAndCredential(t *testing.T) {
	a := agentvmtest.New(t, agentvmtest.Options{Credential: cred})
	conn, ctx := dial(t, a, cred)
	info := agentvmv1.NewInfoClient(conn)
	a.FailNext(agentvmtest.MethodInfo, 2, codes.Unavailable, "starting")

	_, bad := dial(t, a, "wrong")
	if _, err := info.Get(bad, &agentvmv1.GetInfoRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("wrong credential: %v", err)
	}
	if _, err := info.Get(t.Context(), &agentvmv1.GetInfoRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no credential: %v", err)
	}
	for i := range 2 {
		if _, err := info.Get(ctx, &agentvmv1.GetInfoRequest{}); status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "starting" {
			t.Fatalf("call %d: %v, want the fault", i+1, err)
		}
	}
	resp, err := info.Get(ctx, &agentvmv1.GetInfoRequest{})
	if err != nil || resp.GetVersion() != agentvm.Version {
		t.Fatalf("third call: %v, %v; want version %s", resp, err, agentvm.Version)
	}
	a.SetVersion("0.1.0")
	if resp, _ := info.Get(ctx, &agentvmv1.GetInfoRequest{}); resp.GetVersion() != "0.1.0" {
		t.Fatalf("version after SetVersion: %q", resp.GetVersion())
	}
	if n := a.Calls(agentvmtest.MethodInfo); n != 4 {
		t.Fatalf("Calls = %d, want the 4 authenticated calls", n)
	}

	none := agentvmtest.New(t, agentvmtest.Options{})
	conn, ctx = dial(t, none, cred)
	if _, err := agentvmv1.NewInfoClient(conn).Get(ctx, &agentvmv1.GetInfoRequest{}); status.Convert(err).Message() != "no credential yet" {
		t.Fatalf("agent without a credential: %v", err)
	}
}

// TestDesktop: a screenshot is a PNG of the screen's size, downscaled to max_width; input on the
// screen is recorded, off it refused naming the coordinate.
func TestDesktop(t *testing.T) {
	a := agentvmtest.New(t, agentvmtest.Options{Credential: cred, ScreenWidth: 640, ScreenHeight: 400})
	conn, ctx := dial(t, a, cred)
	d := agentvmv1.NewDesktopClient(conn)
	shot, err := d.Screenshot(ctx, &agentvmv1.ScreenshotRequest{MaxWidth: 320})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot.GetPng()))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 320 || b.Dy() != 200 || shot.GetWidth() != 320 || shot.GetScreenWidth() != 640 || shot.GetScreenHeight() != 400 {
		t.Fatalf("screenshot %v, response %dx%d of %dx%d", b, shot.GetWidth(), shot.GetHeight(), shot.GetScreenWidth(), shot.GetScreenHeight())
	}
	if _, err := d.Click(ctx, &agentvmv1.ClickRequest{X: 10, Y: 20, Button: "right"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Type(ctx, &agentvmv1.TypeRequest{Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	_, err = d.Click(ctx, &agentvmv1.ClickRequest{X: 640, Y: 0})
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "x: 640 is off the screen (width 640)" {
		t.Fatalf("click off the screen: %v", err)
	}
	got := a.Inputs()
	if len(got) != 2 || got[0] != (agentvmtest.Input{Verb: "click", X: 10, Y: 20, Button: "right"}) || got[1] != (agentvmtest.Input{Verb: "type", Text: "hi"}) {
		t.Fatalf("inputs %+v", got)
	}
}
