package model

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryDoesNotRepeatATryThatStreamedText(t *testing.T) {
	r := Retry{Attempts: 4, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}.withDefaults()
	tries := 0
	var seen []string
	_, err := r.run(t.Context(), func(d string) { seen = append(seen, d) }, func(ctx context.Context, emit func(string)) (Response, error) {
		tries++
		emit("partial")
		return Response{}, &Error{Message: "read stream: connection reset", Retryable: true}
	})
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, 1, tries)
	require.Equal(t, []string{"partial"}, seen)
}

func TestRetryRepeatsASilentStreamFailure(t *testing.T) {
	r := Retry{Attempts: 4, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}.withDefaults()
	tries := 0
	resp, err := r.run(t.Context(), nil, func(ctx context.Context, emit func(string)) (Response, error) {
		tries++
		if tries < 3 {
			return Response{}, &Error{Message: "stream ended without message_stop", Retryable: true}
		}
		emit("ok")
		return Response{Text: "ok"}, nil
	})
	require.NoError(t, err)
	require.Equal(t, "ok", resp.Text)
	require.Equal(t, 3, tries)
}

func TestRetryPassesOtherErrorsThrough(t *testing.T) {
	boom := errors.New("encode request")
	tries := 0
	_, err := DefaultRetry.run(t.Context(), nil, func(ctx context.Context, emit func(string)) (Response, error) {
		tries++
		return Response{}, boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, tries)
}

func TestRetryWaitBacksOffWithJitter(t *testing.T) {
	r := Retry{Attempts: 10, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}.withDefaults()
	for n, upper := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 5: time.Second, 40: time.Second} {
		for range 50 {
			d, ok := r.wait(n, &Error{Retryable: true})
			require.True(t, ok)
			require.GreaterOrEqual(t, d, upper/2, "try %d", n)
			require.LessOrEqual(t, d, upper, "try %d", n)
		}
	}
}

func TestRetryWaitHonorsRetryAfterUpToALimit(t *testing.T) {
	r := DefaultRetry
	d, ok := r.wait(1, &Error{retryAfter: 3 * time.Second, hasRetryAfter: true})
	require.True(t, ok)
	require.Equal(t, 3*time.Second, d)
	_, ok = r.wait(1, &Error{retryAfter: time.Hour, hasRetryAfter: true})
	require.False(t, ok)
}

func TestRetryAfterHeader(t *testing.T) {
	for _, tc := range []struct {
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{http.Header{"Retry-After": {"0"}}, 0, true},
		{http.Header{"Retry-After": {"7"}}, 7 * time.Second, true},
		{http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond, true},
		{http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"1"}}, 250 * time.Millisecond, true},
		{http.Header{"Retry-After": {"soon"}}, 0, false},
		{http.Header{"Retry-After": {"Wed, 21 Oct 2015 07:28:00 GMT"}}, 0, true},
		{http.Header{}, 0, false},
	} {
		got, ok := retryAfter(tc.header)
		require.Equal(t, tc.ok, ok, "%v", tc.header)
		require.Equal(t, tc.want, got, "%v", tc.header)
	}
}

func TestErrorMessageFromBodies(t *testing.T) {
	require.Equal(t, "bad model", errorMessage(400, []byte(`{"error":{"message":"bad model","type":"invalid_request_error"}}`)))
	require.Equal(t, "overloaded", errorMessage(529, []byte(`{"type":"error","error":{"type":"overloaded_error","message":"overloaded"}}`)))
	require.Equal(t, "quota", errorMessage(429, []byte(`{"error":"quota"}`)))
	require.Equal(t, "<html>bad gateway</html>", errorMessage(502, []byte("<html>bad gateway</html>\n")))
	require.Equal(t, "Service Unavailable", errorMessage(503, nil))
}
