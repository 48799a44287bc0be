package activities

import (
	"context"
	"errors"
	"slices"

	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// ApplicationError types every activity error leaves as. Workflows branch on these strings, never
// on Go sentinels, which do not survive serialization.
const (
	ErrTypeNotFound          = "NotFound"          // the thing does not exist; permanent
	ErrTypeConflict          = "Conflict"          // the request contradicts the current state; permanent
	ErrTypeInvalidArgument   = "InvalidArgument"   // the request is malformed; permanent
	ErrTypeResourceExhausted = "ResourceExhausted" // a quota or limit is reached; permanent until the user frees some
	ErrTypeUnavailable       = "Unavailable"       // a dependency is down; retrying may succeed
	ErrTypeNoCapacity        = "NoCapacity"        // no sandbox can be had right now; retrying may succeed
	ErrTypeSandboxGone       = "SandboxGone"       // the engine no longer has the box's sandbox; claim anew
	ErrTypeSnapshotCorrupt   = "SnapshotCorrupt"   // a stored snapshot fails its checksum; permanent
	ErrTypeInternal          = "Internal"          // anything else; retried in case it was transient
)

// errorTypes is the table between domain error codes and activity error types, read both
// ways: classify goes from a code to its type, DomainCode from a type back to the first code
// that has it. The last rows go one way only: a credential the engine refuses or an endpoint it
// lacks will not change by retrying, so they are permanent like a malformed request.
var errorTypes = []struct{ code, typ string }{
	{cocoonbox.ENotFound, ErrTypeNotFound},
	{cocoonbox.EConflict, ErrTypeConflict},
	{cocoonbox.EInvalid, ErrTypeInvalidArgument},
	{cocoonbox.EResourceExhausted, ErrTypeResourceExhausted},
	{cocoonbox.EUnavailable, ErrTypeUnavailable},
	{cocoonbox.ENoCapacity, ErrTypeNoCapacity},
	{cocoonbox.ECorrupt, ErrTypeSnapshotCorrupt},
	{cocoonbox.EInternal, ErrTypeInternal},
	{cocoonbox.EUnauthorized, ErrTypeInvalidArgument},
	{cocoonbox.EForbidden, ErrTypeInvalidArgument},
	{cocoonbox.EUnimplemented, ErrTypeInvalidArgument},
}

// NonRetryableErrorTypes returns the types a RetryPolicy must not retry. classify already marks
// these errors non-retryable; listing them in the policy too keeps a mistake in one from retrying
// a permanent failure.
func NonRetryableErrorTypes() []string {
	return []string{ErrTypeNotFound, ErrTypeConflict, ErrTypeInvalidArgument, ErrTypeResourceExhausted,
		ErrTypeSandboxGone, ErrTypeSnapshotCorrupt, ErrTypeBudget}
}

// DomainCode returns the domain error code of an activity error type, or "" for a type with no
// code of its own (SandboxGone, which a workflow handles, and types it does not know).
func DomainCode(typ string) string {
	for _, e := range errorTypes {
		if e.typ == typ {
			return e.code
		}
	}
	return ""
}

// classify turns err into the ApplicationError a workflow can branch on, by its domain code
// (store, sandbox and box-link errors all carry one; anything else is Internal). Cancellation
// passes through so Temporal sees it as such.
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
	code := cocoonbox.ErrorCode(err)
	for _, e := range errorTypes {
		if e.code == code {
			typ = e.typ
			break
		}
	}
	return newError(typ, err)
}

// gone is the error for a sandbox the engine no longer has.
func gone(err error) error { return newError(ErrTypeSandboxGone, err) }

func newError(typ string, err error) error {
	opts := temporal.ApplicationErrorOptions{Cause: err, NonRetryable: slices.Contains(NonRetryableErrorTypes(), typ)}
	if d := sandbox.RetryAfter(err); d > 0 {
		opts.NextRetryDelay = d // the engine said when to come back
	}
	msg := err.Error()
	if typ == ErrTypeUnavailable {
		// The dependency's own sentence ("snapshot store (S3 at …) is not answering"), which is
		// what a box's last error and the API show; the chain of retries stays in the cause.
		msg = cocoonbox.ErrorMessage(err)
	}
	return temporal.NewApplicationErrorWithOptions(msg, typ, opts)
}
