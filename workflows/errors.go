package workflows

import (
	"errors"
	"strings"
	"unicode/utf8"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

// DomainError turns an error a Temporal client returned for these workflows into a domain error
// a caller can branch on: a typed failure by its type, a missing workflow as ENotFound, an
// unreachable Temporal as EUnavailable. Anything else is returned as it is (and shown to users as
// "internal error").
func DomainError(err error) error {
	if app, ok := errors.AsType[*temporal.ApplicationError](err); ok {
		code := activities.DomainCode(app.Type())
		if app.Type() == ErrTypeInvalidTransition {
			code = cocoonbox.EConflict // a validator's refusal: the box is not in a state for it
		}
		if code != "" && code != cocoonbox.EInternal {
			return &cocoonbox.Error{Code: code, Message: app.Message(), Err: err}
		}
	}
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return &cocoonbox.Error{Code: cocoonbox.ENotFound, Message: "box not found", Err: err}
	}
	if _, ok := errors.AsType[*serviceerror.Unavailable](err); ok {
		return &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "workflow service unavailable; try again", Err: err}
	}
	return err
}

// maxReason bounds a box's last error: one line a person reads in `box show`.
const maxReason = 240

// reason is how err reads as a box's last error: the message of the failure at its root cause's
// typed layer (an activity's "snapshot store (S3 at …) is not answering", not Temporal's chain
// of activity, retry and cause wrappers, which the worker's log keeps), on one line, bounded.
func reason(err error) string {
	msg := err.Error()
	if app, ok := errors.AsType[*temporal.ApplicationError](err); ok && app.Message() != "" {
		msg = app.Message()
	}
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) > maxReason {
		cut := maxReason
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return msg
}
