package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// ApplicationError types every activity error leaves as. Workflows branch on these strings, never
// on Go sentinels, which do not survive serialization.
const (
	ErrTypeNotFound        = "NotFound"        // the thing does not exist; permanent
	ErrTypeConflict        = "Conflict"        // the request contradicts the current state; permanent
	ErrTypeInvalidArgument = "InvalidArgument" // the request is malformed; permanent
	ErrTypeUnavailable     = "Unavailable"     // a dependency is down; retrying may succeed
	ErrTypeNoCapacity      = "NoCapacity"      // no sandbox can be had right now; retrying may succeed
	ErrTypeSandboxGone     = "SandboxGone"     // the engine no longer has the box's sandbox; claim anew
	ErrTypeSnapshotCorrupt = "SnapshotCorrupt" // a stored snapshot fails its checksum; permanent
	ErrTypeInternal        = "Internal"        // anything else; retried in case it was transient
)

// NonRetryableErrorTypes returns the types a RetryPolicy must not retry. classify already marks
// these errors non-retryable; listing them in the policy too keeps a mistake in one from retrying
// a permanent failure.
func NonRetryableErrorTypes() []string {
	return []string{ErrTypeNotFound, ErrTypeConflict, ErrTypeInvalidArgument, ErrTypeSandboxGone, ErrTypeSnapshotCorrupt}
}

// classify turns err into the ApplicationError a workflow can branch on: the one table from
// sandbox sentinels and cocoonbox error codes to activity error types. Cancellation passes through
// so Temporal sees it as such.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*temporal.ApplicationError](err); ok {
		return err // already classified
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	typ := ErrTypeInternal
	_, domain := errors.AsType[*cocoonbox.Error](err) // already given its meaning (boxlink.Error)
	switch {
	case domain:
		typ = domainType(err)
	case errors.Is(err, sandbox.ErrNotFound):
		typ = ErrTypeNotFound
	case errors.Is(err, sandbox.ErrConflict):
		typ = ErrTypeConflict
	case errors.Is(err, sandbox.ErrInvalid), errors.Is(err, sandbox.ErrUnauthorized),
		errors.Is(err, sandbox.ErrForbidden), errors.Is(err, sandbox.ErrTooLarge),
		errors.Is(err, sandbox.ErrUnimplemented), errors.Is(err, sandbox.ErrUpgradeRequired):
		// A refused credential or an endpoint the engine lacks will not change by retrying.
		typ = ErrTypeInvalidArgument
	case errors.Is(err, sandbox.ErrUnavailable), errors.Is(err, sandbox.ErrTimeout):
		typ = ErrTypeUnavailable
	case errors.Is(err, sandbox.ErrNoCapacity):
		typ = ErrTypeNoCapacity
	case errors.Is(err, sandbox.ErrInternal):
		typ = ErrTypeInternal
	}
	return newError(typ, err)
}

// domainType is the activity error type of a domain error's code.
func domainType(err error) string {
	switch cocoonbox.ErrorCode(err) {
	case cocoonbox.ENotFound:
		return ErrTypeNotFound
	case cocoonbox.EConflict:
		return ErrTypeConflict
	case cocoonbox.EInvalid, cocoonbox.EUnauthorized, cocoonbox.EForbidden, cocoonbox.EUnimplemented:
		return ErrTypeInvalidArgument
	case cocoonbox.EUnavailable:
		return ErrTypeUnavailable
	case cocoonbox.ENoCapacity:
		return ErrTypeNoCapacity
	case cocoonbox.ECorrupt:
		return ErrTypeSnapshotCorrupt
	}
	return ErrTypeInternal
}

// gone is the error for a sandbox the engine no longer has.
func gone(err error) error { return newError(ErrTypeSandboxGone, err) }

func newError(typ string, err error) error {
	opts := temporal.ApplicationErrorOptions{Cause: err}
	switch typ {
	case ErrTypeNotFound, ErrTypeConflict, ErrTypeInvalidArgument, ErrTypeSandboxGone, ErrTypeSnapshotCorrupt:
		opts.NonRetryable = true
	}
	if d := sandbox.RetryAfter(err); d > 0 {
		opts.NextRetryDelay = d // the engine said when to come back
	}
	return temporal.NewApplicationErrorWithOptions(err.Error(), typ, opts)
}
