package boxsvc

import (
	"errors"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/workflows"
)

// codes is the one table from workflow/activity failure types to domain error codes.
var codes = map[string]string{
	workflows.ErrTypeInvalidTransition: cocoonbox.EConflict,
	activities.ErrTypeInvalidArgument:  cocoonbox.EInvalid,
	activities.ErrTypeNotFound:         cocoonbox.ENotFound,
	activities.ErrTypeConflict:         cocoonbox.EConflict,
	activities.ErrTypeNoCapacity:       cocoonbox.ENoCapacity,
	activities.ErrTypeUnavailable:      cocoonbox.EUnavailable,
	activities.ErrTypeSnapshotCorrupt:  cocoonbox.ECorrupt,
}

// translate turns a Temporal client error into a domain error a caller can branch on; anything
// unrecognised stays internal (logged in full by the API, shown as "internal error").
func translate(err error) error {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		if code, ok := codes[app.Type()]; ok {
			return &cocoonbox.Error{Code: code, Message: app.Message(), Err: err}
		}
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return &cocoonbox.Error{Code: cocoonbox.ENotFound, Message: "box not found", Err: err}
	}
	var unavailable *serviceerror.Unavailable
	if errors.As(err, &unavailable) {
		return &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "workflow service unavailable; try again", Err: err}
	}
	return err
}
