package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Error is a failed model call: an HTTP error from the provider or gateway (Status set), a
// transport failure, or an error the provider reported inside a stream (Status 0).
type Error struct {
	Status    int    // HTTP status, 0 when there was none
	Message   string // the provider's message, never containing the API key
	Retryable bool   // 429, 5xx, transport and mid-stream failures

	retryAfter    time.Duration // server-directed wait, when hasRetryAfter
	hasRetryAfter bool
}

// Error reads "model call: status 400: bad model".
func (e *Error) Error() string {
	if e.Status == 0 {
		return "model call: " + e.Message
	}
	return fmt.Sprintf("model call: status %d: %s", e.Status, e.Message)
}

// Retry is the one retry policy of both adapters (the SDKs' own retries are off).
type Retry struct {
	Attempts      int           // total tries, including the first
	BaseDelay     time.Duration // first backoff; doubles per retry, with jitter
	MaxDelay      time.Duration // cap on the computed backoff
	MaxRetryAfter time.Duration // a longer Retry-After fails the call instead of waiting
}

// DefaultRetry is the policy used unless WithRetry says otherwise.
var DefaultRetry = Retry{Attempts: 4, BaseDelay: 500 * time.Millisecond, MaxDelay: 20 * time.Second, MaxRetryAfter: 2 * time.Minute}

func (r Retry) withDefaults() Retry {
	if r.Attempts <= 0 {
		r.Attempts = DefaultRetry.Attempts
	}
	if r.BaseDelay <= 0 {
		r.BaseDelay = DefaultRetry.BaseDelay
	}
	if r.MaxDelay <= 0 {
		r.MaxDelay = DefaultRetry.MaxDelay
	}
	if r.MaxRetryAfter <= 0 {
		r.MaxRetryAfter = DefaultRetry.MaxRetryAfter
	}
	return r
}

// wait returns how long to wait before try n+1 after e, and false when e should not be retried.
func (r Retry) wait(n int, e *Error) (time.Duration, bool) {
	if e.hasRetryAfter {
		return e.retryAfter, e.retryAfter <= r.MaxRetryAfter
	}
	d := r.BaseDelay << (n - 1)
	if d > r.MaxDelay || d <= 0 {
		d = r.MaxDelay
	}
	// Jitter over the upper half keeps boxes that failed together from retrying together.
	return d/2 + rand.N(d/2+1), true
}

// run calls attempt until it succeeds or fails for good. A try that already passed text to
// onText is not repeated, since the caller could not take those deltas back.
func (r Retry) run(ctx context.Context, onText func(string), attempt func(ctx context.Context, emit func(string)) (Response, error)) (Response, error) {
	for n := 1; ; n++ {
		emitted := false
		emit := func(delta string) {
			if delta == "" {
				return
			}
			emitted = true
			if onText != nil {
				onText(delta)
			}
		}
		resp, err := attempt(ctx, emit)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return Response{}, ctx.Err()
		}
		var e *Error
		if !errors.As(err, &e) {
			return Response{}, err
		}
		if !e.Retryable || emitted || n >= r.Attempts {
			return Response{}, e
		}
		d, ok := r.wait(n, e)
		if !ok {
			return Response{}, e
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return Response{}, ctx.Err()
		case <-t.C:
		}
	}
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// checkResponse turns a transport failure or an HTTP error status into *Error, so both SDKs'
// requests fail the same way whatever the body looks like (gateways answer 502 in HTML).
// It runs as SDK middleware, below the SDK's own error decoding.
func checkResponse(ctx context.Context, apiKey string, resp *http.Response, err error) (*http.Response, error) {
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &Error{Message: redact(err.Error(), apiKey), Retryable: true}
	}
	if resp.StatusCode < 400 {
		return resp, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	e := &Error{
		Status:    resp.StatusCode,
		Message:   redact(errorMessage(resp.StatusCode, body), apiKey),
		Retryable: resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500,
	}
	e.retryAfter, e.hasRetryAfter = retryAfter(resp.Header)
	return nil, e
}

// errorMessage finds the message in either protocol's error body ({"error":{"message":...}}),
// falling back to the body's text or the status text.
func errorMessage(status int, body []byte) string {
	var shaped struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &shaped) == nil && len(shaped.Error) > 0 {
		var obj struct {
			Message string `json:"message"`
		}
		var str string
		switch {
		case json.Unmarshal(shaped.Error, &obj) == nil && obj.Message != "":
			return obj.Message
		case json.Unmarshal(shaped.Error, &str) == nil && str != "":
			return str
		}
	}
	if text := strings.TrimSpace(string(body)); text != "" {
		if len(text) > 500 {
			text = text[:500] + "..."
		}
		return text
	}
	return http.StatusText(status)
}

// retryAfter reads retry-after-ms (OpenAI, Anthropic) or Retry-After in seconds or as a date.
func retryAfter(h http.Header) (time.Duration, bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

// streamError classifies a failure while reading a stream that had started well.
func streamError(ctx context.Context, apiKey string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Message: redact("read stream: "+err.Error(), apiKey), Retryable: true}
}

// redact keeps the API key out of messages even when a gateway echoes it back.
func redact(s, apiKey string) string {
	if apiKey == "" {
		return s
	}
	return strings.ReplaceAll(s, apiKey, "[redacted]")
}
