package boxlink_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/agentvmtest"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/boxlink/boxlinktest"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// TestCallsKeepTheirConnection: calls to one box's agent share one relay connection, which is
// what saves a dial a call; a call that finds the agent unreachable drops it, and the next call
// dials again and succeeds rather than waiting out gRPC's reconnect backoff.
func TestCallsKeepTheirConnection(t *testing.T) {
	id := cocoonbox.NewBoxID()
	creds := func(cocoonbox.BoxID) (string, error) { return "cred", nil }
	agent := agentvmtest.New(t, agentvmtest.Options{Credential: "cred"})
	ref := sandbox.SandboxRef{ID: "sb_1", Token: "tok"}
	box := boxlinktest.New(agent, ref)
	l := &boxlink.Link{Sandbox: box, Credentials: creds}
	b, err := l.At(id, ref)
	if err != nil {
		t.Fatal(err)
	}
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
	agent.FailNext(agentvmtest.MethodScreenshot, 1, codes.Unavailable, "agent restarting")
	if err := get(); cocoonbox.ErrorCode(err) != cocoonbox.EUnavailable {
		t.Fatalf("call on an unavailable agent: %v, want unavailable", err)
	}
	if err := get(); err != nil {
		t.Fatalf("the call after: %v", err)
	}
	if n := box.Dials(); n != 2 {
		t.Errorf("%d dials after a dropped connection, want 2", n)
	}
}
