package workflows

import (
	"errors"
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
