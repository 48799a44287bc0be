package workflows

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

// TestDomainError: what a caller of the box workflow gets back has the domain code it can act
// on, with the failure's own message; what no row names stays as it is.
func TestDomainError(t *testing.T) {
	for _, tc := range []struct {
		in   error
		code string
		msg  string
	}{
		{temporal.NewApplicationError("cannot wake a deleted box", ErrTypeInvalidTransition), cocoonbox.EConflict, "cannot wake a deleted box"},
		{temporal.NewApplicationError("bad size", activities.ErrTypeInvalidArgument), cocoonbox.EInvalid, "bad size"},
		{temporal.NewApplicationError("no such snapshot", activities.ErrTypeNotFound), cocoonbox.ENotFound, "no such snapshot"},
		{temporal.NewApplicationError("engine full", activities.ErrTypeNoCapacity), cocoonbox.ENoCapacity, "engine full"},
		{temporal.NewApplicationError("engine down", activities.ErrTypeUnavailable), cocoonbox.EUnavailable, "engine down"},
		{temporal.NewApplicationError("bad checksum", activities.ErrTypeSnapshotCorrupt), cocoonbox.ECorrupt, "bad checksum"},
		{serviceerror.NewNotFound("workflow not found"), cocoonbox.ENotFound, "box not found"},
		{serviceerror.NewUnavailable("connection refused"), cocoonbox.EUnavailable, "try again"},
	} {
		got := DomainError(tc.in)
		if cocoonbox.ErrorCode(got) != tc.code || !strings.Contains(cocoonbox.ErrorMessage(got), tc.msg) {
			t.Errorf("DomainError(%v) = %v, want %s %q", tc.in, got, tc.code, tc.msg)
		}
	}
	other := errors.New("boom")
	if DomainError(other) != other {
		t.Error("an unknown error was changed")
	}
}

// TestReason: a box's last error is the typed failure's own sentence on one line, however deep
// Temporal wraps it, and bounded.
func TestReason(t *testing.T) {
	s3 := temporal.NewApplicationErrorWithCause("snapshot store (S3 at 127.0.0.1:8421) is not answering",
		activities.ErrTypeUnavailable, errors.New("operation error S3: PutObject, exceeded maximum number of attempts, 3,\nhttps response error: dial tcp: connection refused"))
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"typed": {fmt.Errorf("activity error (type: UploadSnapshot, scheduledEventID: 11): %w", s3), "snapshot store (S3 at 127.0.0.1:8421) is not answering"},
		"plain": {errors.New("line one\n  line two"), "line one line two"},
		"long":  {errors.New(strings.Repeat("é", 300)), strings.Repeat("é", maxReason/2) + "…"},
	} {
		if got := reason(tc.err); got != tc.want {
			t.Errorf("%s: reason = %q, want %q", name, got, tc.want)
		}
		if strings.Contains(reason(tc.err), "\n") || len(reason(tc.err)) > maxReason+len("…") {
			t.Errorf("%s: reason %q is not one bounded line", name, reason(tc.err))
		}
	}
}
