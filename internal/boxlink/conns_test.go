package boxlink_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/agentvmtest"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/boxlink/boxlinktest"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// TestCallsKeepTheirConnection: calls to one box's agent share one relay connection, which is
// what saves a dial a call. An agent that answers UNAVAILABLE over it leaves it up, so it stays;
// once it is down (the box hibernated) and the relay refuses the next dial (the agent not up
// yet), the connection is dropped, and the call after dials again and succeeds rather than
// failing on gRPC's reconnect backoff.
func TestCallsKeepTheirConnection(t *testing.T) {
	box, l, b := newLink(t, agentvmtest.Options{Credential: "cred"})
	get := func() error {
		return l.Desktop(context.Background(), b, func(ctx context.Context, c agentvmv1.DesktopClient) error {
			_, err := c.Screenshot(ctx, &agentvmv1.ScreenshotRequest{})
			return err
		})
	}
	for range 3 {
		if err := get(); err != nil {
			t.Fatal(err)
		}
	}
	if n := box.Dials(); n != 1 {
		t.Fatalf("3 calls dialed %d times, want 1", n)
	}
	box.Agent.FailNext(agentvmtest.MethodScreenshot, 1, codes.Unavailable, "agent restarting")
	if err := get(); cocoonbox.ErrorCode(err) != cocoonbox.EUnavailable {
		t.Fatalf("call on an unavailable agent: %v, want unavailable", err)
	}
	if err := get(); err != nil || box.Dials() != 1 {
		t.Fatalf("the call after an agent's UNAVAILABLE over a connection that is up: %v, %d dials, want it on the same connection", err, box.Dials())
	}

	box.Cut()
	box.RefuseNext(1)
	var err error
	for range 2 { // one call may still go out on the cut connection before gRPC sees it closed
		if err = get(); box.Refused() == 1 {
			break
		}
	}
	if box.Refused() != 1 || cocoonbox.ErrorCode(err) != cocoonbox.EUnavailable {
		t.Fatalf("calls after the cut: %v, %d dials refused; want the refused one unavailable", err, box.Refused())
	}
	if err := get(); err != nil {
		t.Fatalf("the call after a refused dial: %v, want it to dial again at once", err)
	}
}

// TestACallersUnavailableLeavesOtherCallsAlone: a call can fail UNAVAILABLE on its caller's side
// (a client hangs up on a shell while its output is being passed on, and the send to it fails
// "transport is closing"); the connection to the agent is up, so it stays, and a step running on
// it at the same time carries on. Closing it ended every other call on the box.
func TestACallersUnavailableLeavesOtherCallsAlone(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	box, l, b := newLink(t, agentvmtest.Options{Credential: "cred", Step: func(ctx context.Context, req *agentvmv1.StepRequest) (*agentvmv1.StepResponse, error) {
		close(started)
		select {
		case <-release:
			return &agentvmv1.StepResponse{Done: true}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stepped := make(chan error, 1)
	go func() {
		stepped <- l.Agents(ctx, b, func(ctx context.Context, c agentvmv1.AgentsClient) error {
			_, err := c.Step(ctx, &agentvmv1.StepRequest{RunId: "run_1", Step: 1})
			return err
		})
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the step never started")
	}
	err := l.Desktop(ctx, b, func(context.Context, agentvmv1.DesktopClient) error {
		return status.Error(codes.Unavailable, "transport is closing") // the caller's stream, gone
	})
	if cocoonbox.ErrorCode(err) != cocoonbox.EUnavailable {
		t.Fatalf("the hung-up call: %v, want unavailable", err)
	}
	close(release)
	if err := <-stepped; err != nil {
		t.Fatalf("the step running beside it: %v", err)
	}
	if n := box.Dials(); n != 1 {
		t.Errorf("%d dials, want the one connection kept", n)
	}
}

// newLink returns a box whose agent is a fake with opts, a link to it and the box as the link
// sees it.
func newLink(t *testing.T, opts agentvmtest.Options) (*boxlinktest.Box, *boxlink.Link, boxlink.Box) {
	t.Helper()
	id := cocoonbox.NewBoxID()
	creds := func(cocoonbox.BoxID) (string, error) { return "cred", nil }
	ref := sandbox.SandboxRef{ID: "sb_1", Token: "tok"}
	box := boxlinktest.New(agentvmtest.New(t, opts), ref)
	l := &boxlink.Link{Sandbox: box, Credentials: creds}
	b, err := l.At(id, ref)
	if err != nil {
		t.Fatal(err)
	}
	return box, l, b
}
