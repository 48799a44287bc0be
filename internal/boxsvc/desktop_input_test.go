package boxsvc

import (
	"context"
	"fmt"
	"strings"
	"testing"

	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// TestDesktopError: the agent's answers and the relay's refusals reach callers with the domain
// code they can act on, and the agent's message where it names a field.
func TestDesktopError(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		in   error
		code string
		msg  string
	}{
		{status.Error(grpccodes.InvalidArgument, "x: 5000 is off the 1280x800 screen"), cocoonbox.EInvalid, "x: 5000 is off the 1280x800 screen"},
		{status.Error(grpccodes.Unavailable, "connection refused"), cocoonbox.EUnavailable, "not answering yet"},
		{status.Error(grpccodes.Unauthenticated, "no credential yet"), cocoonbox.EUnavailable, "credential"},
		{status.Error(grpccodes.FailedPrecondition, "no display"), cocoonbox.EConflict, "no display"},
		{status.Error(grpccodes.Unimplemented, "unknown service"), cocoonbox.EUnimplemented, "no desktop service"},
		{fmt.Errorf("dial agent: %w", sandbox.ErrUnavailable), cocoonbox.EUnavailable, "agent is not answering"},
		{fmt.Errorf("dial agent: %w", sandbox.ErrNotFound), cocoonbox.EUnavailable, "sandbox is gone"},
		{fmt.Errorf("dial agent: %w", sandbox.ErrNoCapacity), cocoonbox.EUnavailable, "busy"},
		{status.Error(grpccodes.Internal, "boom"), cocoonbox.EInternal, ""},
	}
	for _, tc := range cases {
		got := desktopError(ctx, tc.in)
		if cocoonbox.ErrorCode(got) != tc.code || !strings.Contains(cocoonbox.ErrorMessage(got), tc.msg) {
			t.Errorf("desktopError(%v) = %v (code %s), want code %s with %q", tc.in, got, cocoonbox.ErrorCode(got), tc.code, tc.msg)
		}
	}
	if desktopError(ctx, nil) != nil {
		t.Error("desktopError(nil) != nil")
	}
}
