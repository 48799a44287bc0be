package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// kind is what went wrong as the caller sees it. statusOf maps kinds to HTTP
// statuses; every handler answers errors through writeError so the table is the only place
// that decides a status.
type kind int

const (
	kindInvalid         kind = iota + 1 // the request is malformed; the message names the field
	kindUnauthorized                    // no credential, or an unknown node token
	kindForbidden                       // a tenant asked for an operator endpoint
	kindNotFound                        // unknown, released or expired — or a wrong sandbox token
	kindConflict                        // the request contradicts the sandbox's state
	kindTooLarge                        // exec output or an imported disk over its cap
	kindUpgradeRequired                 // a relay without the Upgrade header
	kindNotImplemented                  // an optional upstream endpoint this engine lacks
	kindBadGateway                      // the box answered nothing on the asked port
	kindUnavailable                     // a start failed, or the engine is closing; retry later
	kindNoCapacity                      // at a limit (boxes, memory): retry later, or elsewhere
	kindTimeout                         // exec ran past its timeout
)

var statusOf = map[kind]int{
	kindInvalid:         http.StatusBadRequest,
	kindUnauthorized:    http.StatusUnauthorized,
	kindForbidden:       http.StatusForbidden,
	kindNotFound:        http.StatusNotFound,
	kindConflict:        http.StatusConflict,
	kindTooLarge:        http.StatusRequestEntityTooLarge,
	kindUpgradeRequired: http.StatusUpgradeRequired,
	kindNotImplemented:  http.StatusNotImplemented,
	kindBadGateway:      http.StatusBadGateway,
	kindUnavailable:     http.StatusServiceUnavailable,
	kindNoCapacity:      http.StatusTooManyRequests,
	kindTimeout:         http.StatusGatewayTimeout,
}

// retryAfterSeconds is what a 503 tells a client to wait: long enough for a box to start.
const retryAfterSeconds = "5"

// apiError is an error a caller may see. Any other error is internal: it reaches the log in
// full and the caller as "internal error".
type apiError struct {
	kind kind
	msg  string
	err  error // cause, for the log
}

func (e *apiError) Error() string {
	if e.err != nil {
		return e.msg + ": " + e.err.Error()
	}
	return e.msg
}

func (e *apiError) Unwrap() error { return e.err }

func newError(k kind, format string, args ...any) error {
	return &apiError{kind: k, msg: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) error { return newError(kindInvalid, format, args...) }

var (
	errUnknownSandbox    = &apiError{kind: kindNotFound, msg: "unknown sandbox"}
	errUnknownCheckpoint = &apiError{kind: kindNotFound, msg: "unknown checkpoint"}
	errBadBody           = &apiError{kind: kindInvalid, msg: sandbox.MsgInvalidBody}
	errMissingToken      = &apiError{kind: kindUnauthorized, msg: "missing bearer token"}
	errBadToken          = &apiError{kind: kindUnauthorized, msg: "invalid api token"}
	errOperatorOnly      = &apiError{kind: kindForbidden, msg: sandbox.MsgOperatorRequired}
	errClosed            = &apiError{kind: kindUnavailable, msg: "engine is shutting down"}
)

// writeError answers err with its status from statusOf. A 503 and a 429 carry Retry-After.
func (e *Engine) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		e.log.ErrorContext(r.Context(), "internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		writeJSON(w, http.StatusInternalServerError, sandbox.ErrorBody{Error: "internal error"})
		return
	}
	code := statusOf[ae.kind]
	if ae.err != nil {
		e.log.WarnContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "status", code, "err", ae.err)
	}
	switch ae.kind {
	case kindUnavailable, kindNoCapacity:
		w.Header().Set("Retry-After", retryAfterSeconds)
	case kindUpgradeRequired:
		w.Header().Set("Upgrade", "tcp")
		w.Header().Set("Connection", "Upgrade")
	}
	writeJSON(w, code, sandbox.ErrorBody{Error: ae.msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// bodyRule says how strictly a body is read.
type bodyRule int

const (
	bodyRequired bodyRule = iota // an empty body is malformed
	bodyOptional                 // an empty body is the zero value (every field optional)
	bodyStrict                   // required, and unknown fields are rejected
)

// decode reads a JSON body of at most 1 MiB into dst. A malformed, oversized or trailing-garbage
// body is errBadBody; an unknown field under bodyStrict names the field.
func decode(w http.ResponseWriter, r *http.Request, dst any, rule bodyRule) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, sandbox.MaxBodyBytes))
	if err != nil {
		return errBadBody
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if rule == bodyOptional {
			return nil
		}
		return errBadBody
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if rule == bodyStrict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(dst); err != nil {
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return &apiError{kind: kindInvalid, msg: sandbox.MsgInvalidBody + ": unknown field " + field}
		}
		return errBadBody
	}
	if err := dec.Decode(new(json.RawMessage)); !errors.Is(err, io.EOF) {
		return errBadBody // trailing data after the object
	}
	return nil
}
