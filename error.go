package cocoonbox

import (
	"errors"
	"fmt"
)

// Error codes. Each boundary (gRPC, MCP, HTTP, activities, CLI) maps them to its own in one table.
const (
	EInvalid       = "invalid"       // the request is malformed; the message names the field
	ENotFound      = "not_found"     // the thing does not exist or the caller may not see it
	EConflict      = "conflict"      // the request contradicts the current state
	EUnauthorized  = "unauthorized"  // no credential, or an unknown, expired or revoked one
	EForbidden     = "forbidden"     // the caller is known but lacks the role
	EUnavailable   = "unavailable"   // a dependency is down; retrying later may succeed
	ENoCapacity    = "no_capacity"   // no sandbox can be had right now
	EInternal      = "internal"      // a bug or an unexpected failure; details stay in the log
	EUnimplemented = "unimplemented" // the operation exists in the API but not in this build
	ECorrupt       = "corrupt"       // stored data fails its checksum; the message names it
	// EResourceExhausted is a quota or limit reached; the message names the limit and its value.
	EResourceExhausted = "resource_exhausted"
)

// Error is an application error with a code a client can branch on and a message a person can
// read. Internal errors keep their cause for the log but never show it to callers.
type Error struct {
	Code    string
	Field   string // the request field at fault, when there is one (always for EInvalid from Invalid)
	Message string // what is wrong; shown after "field: " when Field is set
	Err     error  // optional cause, for logs
}

// Error implements error.
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.text(), e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.text())
}

// text is the message a caller reads: the field, then what is wrong with it.
func (e *Error) text() string {
	if e.Field != "" {
		return e.Field + ": " + e.Message
	}
	return e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid returns an EInvalid error naming the field and the reason.
func Invalid(field, reason string) *Error {
	return &Error{Code: EInvalid, Field: field, Message: reason}
}

// ErrorField returns the field the first *Error in err's chain names, or "".
func ErrorField(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Field
	}
	return ""
}

// RenameField returns err naming the field to instead of from when the first *Error in its chain
// names from, so a transport can tell a client the field it sent rather than the service layer's
// name for it. Any other error is returned as it is.
func RenameField(err error, from, to string) error {
	e, ok := errors.AsType[*Error](err)
	if !ok || e.Field != from {
		return err
	}
	renamed := *e
	renamed.Field = to
	return &renamed
}

// QuotaReached returns an EResourceExhausted error naming the limit and its value, as in
// "quota: boxes per user (3) reached".
func QuotaReached(limit string, value int) *Error {
	return Errorf(EResourceExhausted, "quota: %s (%d) reached", limit, value)
}

// ErrorCode returns the code of the first *Error in err's chain, EInternal for any other non-nil
// error and "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}

// ErrorMessage returns the message a caller may see: the *Error's message, or "internal error"
// for anything else so that internal details reach only the log.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) && e.Code != EInternal {
		return e.text()
	}
	return "internal error"
}
