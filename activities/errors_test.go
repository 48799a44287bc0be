package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// engineErr is the error the sandbox client returns for an engine's refusal.
func engineErr(kind *cocoonbox.Error, retryAfter time.Duration) error {
	return &sandbox.Error{Op: "claim", Status: 503, Message: "busy", RetryAfter: retryAfter, Kind: kind}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		typ        string
		retryable  bool
		retryDelay time.Duration
	}{
		// Engine sentinels, as the client returns them and wrapped once more by an activity.
		{"sandbox not found", engineErr(sandbox.ErrNotFound, 0), ErrTypeNotFound, false, 0},
		{"sandbox not found wrapped", fmt.Errorf("wake sb-1: %w", engineErr(sandbox.ErrNotFound, 0)), ErrTypeNotFound, false, 0},
		{"sandbox conflict", engineErr(sandbox.ErrConflict, 0), ErrTypeConflict, false, 0},
		{"sandbox invalid", engineErr(sandbox.ErrInvalid, 0), ErrTypeInvalidArgument, false, 0},
		{"sandbox unauthorized", engineErr(sandbox.ErrUnauthorized, 0), ErrTypeInvalidArgument, false, 0},
		{"sandbox forbidden", engineErr(sandbox.ErrForbidden, 0), ErrTypeInvalidArgument, false, 0},
		{"sandbox too large", engineErr(sandbox.ErrTooLarge, 0), ErrTypeResourceExhausted, false, 0},
		{"sandbox unimplemented", engineErr(sandbox.ErrUnimplemented, 0), ErrTypeInvalidArgument, false, 0},
		{"sandbox upgrade required", engineErr(sandbox.ErrUpgradeRequired, 0), ErrTypeInvalidArgument, false, 0},
		{"sandbox unavailable", engineErr(sandbox.ErrUnavailable, 0), ErrTypeUnavailable, true, 0},
		{"sandbox unavailable retry-after", engineErr(sandbox.ErrUnavailable, 7*time.Second), ErrTypeUnavailable, true, 7 * time.Second},
		{"sandbox unavailable retry-after wrapped", fmt.Errorf("claim: %w", engineErr(sandbox.ErrUnavailable, 3*time.Second)), ErrTypeUnavailable, true, 3 * time.Second},
		{"sandbox timeout", engineErr(sandbox.ErrTimeout, 0), ErrTypeUnavailable, true, 0},
		{"sandbox no capacity", engineErr(sandbox.ErrNoCapacity, 0), ErrTypeNoCapacity, true, 0},
		{"sandbox no capacity retry-after", engineErr(sandbox.ErrNoCapacity, time.Minute), ErrTypeNoCapacity, true, time.Minute},
		{"sandbox internal", engineErr(sandbox.ErrInternal, 0), ErrTypeInternal, true, 0},
		{"bare sentinel", sandbox.ErrConflict, ErrTypeConflict, false, 0},

		// Root-package codes, e.g. from the store or a Validate.
		{"code not found", cocoonbox.Errorf(cocoonbox.ENotFound, "no token"), ErrTypeNotFound, false, 0},
		{"code conflict", cocoonbox.Errorf(cocoonbox.EConflict, "name taken"), ErrTypeConflict, false, 0},
		{"code invalid", cocoonbox.Errorf(cocoonbox.EInvalid, "size: unknown"), ErrTypeInvalidArgument, false, 0},
		{"code invalid field", cocoonbox.Invalid("name", "empty"), ErrTypeInvalidArgument, false, 0},
		{"code unauthorized", cocoonbox.Errorf(cocoonbox.EUnauthorized, "x"), ErrTypeInvalidArgument, false, 0},
		{"code forbidden", cocoonbox.Errorf(cocoonbox.EForbidden, "x"), ErrTypeInvalidArgument, false, 0},
		{"code unimplemented", cocoonbox.Errorf(cocoonbox.EUnimplemented, "x"), ErrTypeInvalidArgument, false, 0},
		{"code unavailable", cocoonbox.Errorf(cocoonbox.EUnavailable, "db down"), ErrTypeUnavailable, true, 0},
		{"code unavailable deep", fmt.Errorf("upload snapshot sn_1: put: operation error S3: exceeded 3 attempts: %w",
			&cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "snapshot store (S3 at 127.0.0.1:8421) is not answering",
				Err: errors.New("dial tcp 127.0.0.1:8421: connect: connection refused")}), ErrTypeUnavailable, true, 0},
		{"code no capacity", cocoonbox.Errorf(cocoonbox.ENoCapacity, "x"), ErrTypeNoCapacity, true, 0},
		{"code internal", cocoonbox.Errorf(cocoonbox.EInternal, "x"), ErrTypeInternal, true, 0},
		{"code quota", cocoonbox.QuotaReached("boxes per user", 3), ErrTypeResourceExhausted, false, 0},
		{"code wrapped", fmt.Errorf("create box: %w", cocoonbox.Errorf(cocoonbox.EConflict, "x")), ErrTypeConflict, false, 0},

		// Anything else is internal and retried, in case it was transient.
		{"plain error", errors.New("connection reset"), ErrTypeInternal, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := classify(tc.err)
			app, ok := errors.AsType[*temporal.ApplicationError](got)
			if !ok {
				t.Fatalf("classify(%v) = %T %v, want an ApplicationError", tc.err, got, got)
			}
			if app.Type() != tc.typ {
				t.Errorf("type = %q, want %q", app.Type(), tc.typ)
			}
			if app.NonRetryable() == tc.retryable {
				t.Errorf("non-retryable = %v, want %v", app.NonRetryable(), !tc.retryable)
			}
			if app.NextRetryDelay() != tc.retryDelay {
				t.Errorf("next retry delay = %v, want %v", app.NextRetryDelay(), tc.retryDelay)
			}
			// An unavailable dependency reads as its own sentence; the chain stays in the cause.
			want := tc.err.Error()
			if tc.typ == ErrTypeUnavailable {
				want = cocoonbox.ErrorMessage(tc.err)
			}
			if app.Message() != want {
				t.Errorf("message = %q, want %q", app.Message(), want)
			}
			if !errors.Is(got, tc.err) {
				t.Error("the cause is not kept")
			}
			if nr := slices.Contains(NonRetryableErrorTypes(), tc.typ); nr != !tc.retryable {
				t.Errorf("NonRetryableErrorTypes lists %q: %v, want %v", tc.typ, nr, !tc.retryable)
			}
		})
	}
}

func TestClassifyPassesThrough(t *testing.T) {
	t.Run("nil", func(t *testing.T) {
		if err := classify(nil); err != nil {
			t.Fatalf("classify(nil) = %v", err)
		}
	})
	app := temporal.NewNonRetryableApplicationError("gone", ErrTypeSandboxGone, nil)
	for _, tc := range []struct {
		name string
		err  error
	}{
		// Cancellation stays cancellation, so Temporal sees the activity canceled, not failed.
		{"canceled", context.Canceled},
		{"deadline", context.DeadlineExceeded},
		{"canceled wrapped", fmt.Errorf("wait ready: %w", context.Canceled)},
		// An error already classified keeps its type.
		{"application error", app},
		{"application error wrapped", fmt.Errorf("renew: %w", app)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err); got != tc.err {
				t.Fatalf("classify(%v) = %v, want it unchanged", tc.err, got)
			}
		})
	}
}

func TestGone(t *testing.T) {
	cause := fmt.Errorf("wake sandbox sb-1: %w", engineErr(sandbox.ErrNotFound, 0))
	app, ok := errors.AsType[*temporal.ApplicationError](gone(cause))
	if !ok {
		t.Fatalf("gone() is not an ApplicationError")
	}
	if app.Type() != ErrTypeSandboxGone || !app.NonRetryable() {
		t.Errorf("gone() = %q non-retryable %v, want %q non-retryable", app.Type(), app.NonRetryable(), ErrTypeSandboxGone)
	}
	if !errors.Is(app, sandbox.ErrNotFound) {
		t.Error("the cause is not kept")
	}
	if !slices.Contains(NonRetryableErrorTypes(), ErrTypeSandboxGone) {
		t.Error("SandboxGone is missing from NonRetryableErrorTypes")
	}
}

// TestDomainCodeRoundTrip: every code classify gives its own type comes back as that code, so a
// caller of a workflow sees the code the activity failed with.
func TestDomainCodeRoundTrip(t *testing.T) {
	for _, code := range []string{cocoonbox.ENotFound, cocoonbox.EConflict, cocoonbox.EInvalid, cocoonbox.EResourceExhausted,
		cocoonbox.EUnavailable, cocoonbox.ENoCapacity, cocoonbox.ECorrupt, cocoonbox.EInternal} {
		app, ok := errors.AsType[*temporal.ApplicationError](classify(cocoonbox.Errorf(code, "x")))
		if !ok {
			t.Fatalf("classify(%s) is not an ApplicationError", code)
		}
		if got := DomainCode(app.Type()); got != code {
			t.Errorf("DomainCode(%s) = %q, want %q", app.Type(), got, code)
		}
	}
	if DomainCode(ErrTypeSandboxGone) != "" {
		t.Error("SandboxGone has a domain code; the workflow handles it")
	}
}
