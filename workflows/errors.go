package workflows

import (
	"errors"

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
