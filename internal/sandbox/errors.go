package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox"
)

// Sentinel errors: what an engine's answer means, whatever the operation. Each is a domain error,
// so a caller branches on errors.Is for the engine's exact answer or on cocoonbox.ErrorCode for
// its meaning, and an *Error found with errors.As as a *cocoonbox.Error carries the engine's words.
var (
	ErrInvalid         = sentinel(cocoonbox.EInvalid, "invalid")             // 400: the request is malformed or names something unknown
	ErrUnauthorized    = sentinel(cocoonbox.EUnauthorized, "unauthorized")   // 401: no credential, or an unknown one
	ErrForbidden       = sentinel(cocoonbox.EForbidden, "forbidden")         // 403: a tenant token on a root-only endpoint
	ErrNotFound        = sentinel(cocoonbox.ENotFound, "not found")          // 404: unknown id, or a wrong sandbox token
	ErrConflict        = sentinel(cocoonbox.EConflict, "conflict")           // 409: e.g. hibernate on the egress lane, renew while archived
	ErrTooLarge        = sentinel(cocoonbox.EResourceExhausted, "too large") // 413: exec output over MaxExecOutput, a disk over its quota
	ErrUpgradeRequired = sentinel(cocoonbox.EInvalid, "upgrade required")    // 426: a relay without the Upgrade header
	ErrNoCapacity      = sentinel(cocoonbox.ENoCapacity, "no capacity")      // 429: node or tenant at max claims, or draining
	ErrUnimplemented   = sentinel(cocoonbox.EUnimplemented, "unimplemented") // 501: the engine does not serve this endpoint
	ErrUnavailable     = sentinel(cocoonbox.EUnavailable, "unavailable")     // 502, 503: try again later (see RetryAfter)
	ErrTimeout         = sentinel(cocoonbox.EUnavailable, "timeout")         // 504: exec outlived timeout_seconds; the child was killed
	ErrInternal        = sentinel(cocoonbox.EInternal, "internal")           // 500 and anything unexpected
)

func sentinel(code, message string) *cocoonbox.Error {
	return &cocoonbox.Error{Code: code, Message: message}
}

// statusKinds maps HTTP statuses to sentinels. Statuses not listed map by class
// (kindOf); HTTPStatus reads it the other way for the engine.
var statusKinds = []struct {
	status int
	kind   *cocoonbox.Error
}{
	{http.StatusBadRequest, ErrInvalid},
	{http.StatusUnauthorized, ErrUnauthorized},
	{http.StatusForbidden, ErrForbidden},
	{http.StatusNotFound, ErrNotFound},
	{http.StatusConflict, ErrConflict},
	{http.StatusRequestEntityTooLarge, ErrTooLarge},
	{http.StatusUpgradeRequired, ErrUpgradeRequired},
	{http.StatusTooManyRequests, ErrNoCapacity},
	{http.StatusInternalServerError, ErrInternal},
	{http.StatusNotImplemented, ErrUnimplemented},
	{http.StatusServiceUnavailable, ErrUnavailable}, // first, so HTTPStatus(ErrUnavailable) is 503
	{http.StatusBadGateway, ErrUnavailable},         // guest unreachable: retrying may succeed
	{http.StatusGatewayTimeout, ErrTimeout},
}

func kindOf(status int) *cocoonbox.Error {
	for _, e := range statusKinds {
		if e.status == status {
			return e.kind
		}
	}
	if status >= 400 && status < 500 {
		return ErrInvalid // the engine refused the request as sent
	}
	return ErrInternal
}

// FromEngine reports whether err is an engine's answer, or one of the sentinels standing for one:
// a caller that passes other domain errors through still gives these the meaning of its context
// (a sandbox not found on the way to a box's agent is a box to wake, not a box that is gone).
func FromEngine(err error) bool {
	if _, ok := errors.AsType[*Error](err); ok {
		return true
	}
	for _, e := range statusKinds {
		if errors.Is(err, e.kind) {
			return true
		}
	}
	return false
}

// HTTPStatus is the status an engine answers for an error wrapping one of the sentinels, so the
// local engine and the fake answer from the same table the client reads: 500 for anything else.
func HTTPStatus(err error) int {
	for _, e := range statusKinds {
		if errors.Is(err, e.kind) {
			return e.status
		}
	}
	return http.StatusInternalServerError
}

// Error is an engine's refusal: the operation, the status and message it answered, and the
// sentinel it means. It prints as `sandbox: claim: 400 unknown size "huge": invalid`.
type Error struct {
	Op         string           // the client operation, e.g. "claim", "exec sb_…"
	Status     int              // the HTTP status; 0 when the client refused before sending
	Message    string           // the engine's {"error": …} text, or the raw body start
	RetryAfter time.Duration    // from the Retry-After header, when the engine sent one
	Kind       *cocoonbox.Error // one of the sentinels above
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("sandbox: ")
	b.WriteString(e.Op)
	b.WriteString(": ")
	if e.Status != 0 {
		b.WriteString(strconv.Itoa(e.Status))
		if e.Message != "" {
			b.WriteString(" ")
		}
	}
	b.WriteString(e.Message)
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	b.WriteString(": ")
	b.WriteString(e.Kind.Message)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrNotFound) and friends work.
func (e *Error) Unwrap() error { return e.Kind }

// As makes errors.As(err, &domainErr) find the domain error the answer means: the sentinel's code
// with the operation and the engine's own words as the message, so a caller that passes the error
// on tells the user what the engine said rather than "not found".
func (e *Error) As(target any) bool {
	t, ok := target.(**cocoonbox.Error)
	if !ok {
		return false
	}
	msg := e.Message
	if msg == "" {
		msg = e.Kind.Message
	}
	*t = &cocoonbox.Error{Code: e.Kind.Code, Message: "sandbox engine: " + e.Op + ": " + msg, Err: e.Kind}
	return true
}

// RetryAfter returns how long the engine asked the caller to wait (503 Retry-After), or 0.
func RetryAfter(err error) time.Duration {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.RetryAfter
	}
	return 0
}

// Message returns the engine's own words behind err (its {"error": …} text), or err's text when
// err is not an engine answer.
func Message(err error) string {
	if e, ok := errors.AsType[*Error](err); ok && e.Message != "" {
		return e.Message
	}
	return err.Error()
}

// StatusCode returns the HTTP status behind err, or 0 when err is not an engine answer (a
// transport failure, a refusal before sending).
func StatusCode(err error) int {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Status
	}
	return 0
}

// invalid is a request the client refuses to send.
func invalid(op, format string, args ...any) error {
	return &Error{Op: op, Message: fmt.Sprintf(format, args...), Kind: ErrInvalid}
}

// maxErrorBody bounds how much of an error answer is read: the message is a line, not a payload.
const maxErrorBody = 64 << 10

// statusError reads a non-success answer into an *Error. It never fails: a body that is not the
// contract's {"error": …} is quoted as the message, so a proxy's HTML page still says something.
func statusError(op string, resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body ErrorBody
	msg := ""
	if json.Unmarshal(raw, &body) == nil && body.Error != "" {
		msg = body.Error
	} else if s := strings.TrimSpace(string(raw)); s != "" {
		msg = truncate(s, 200)
	}
	return &Error{
		Op:         op,
		Status:     resp.StatusCode,
		Message:    msg,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
		Kind:       kindOf(resp.StatusCode),
	}
}

// parseRetryAfter reads either form RFC 9110 allows: delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now).Round(time.Second)
	}
	return 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// uncertain reports whether a failed call may still have taken effect on the engine: the answer
// was lost after the request went out (transport error, unreadable body) or came from a failing
// server or proxy (5xx other than 501). A 4xx is the engine's definite refusal, and a connection
// that was never made carried nothing.
func uncertain(err error) bool {
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return false // never connected: nothing was sent
	}
	e, ok := errors.AsType[*Error](err)
	if !ok {
		return true
	}
	return e.Status >= 500 && e.Status != http.StatusNotImplemented
}
