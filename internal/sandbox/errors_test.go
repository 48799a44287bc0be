package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
)

// TestStatusTable checks every status the contract names lands on its sentinel with the engine's
// message, and that HTTPStatus reads the same table back for the engine.
func TestStatusTable(t *testing.T) {
	cases := []struct {
		status int
		kind   *cocoonbox.Error
	}{
		{400, ErrInvalid}, {401, ErrUnauthorized}, {403, ErrForbidden}, {404, ErrNotFound},
		{409, ErrConflict}, {413, ErrTooLarge}, {426, ErrUpgradeRequired}, {429, ErrNoCapacity},
		{500, ErrInternal}, {501, ErrUnimplemented}, {502, ErrUnavailable}, {503, ErrUnavailable},
		{504, ErrTimeout}, {405, ErrInvalid}, {418, ErrInvalid}, {507, ErrInternal},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":"message %d"}`, status)
	}))
	defer srv.Close()
	c := NewHTTP(srv.URL, "tok", srv.Client())
	for _, tc := range cases {
		err := c.do(t.Context(), call{op: "probe", method: http.MethodGet, path: "/", query: map[string][]string{"status": {strconv.Itoa(tc.status)}}})
		if !errors.Is(err, tc.kind) {
			t.Errorf("%d: got %v, want %v", tc.status, err, tc.kind)
			continue
		}
		want := fmt.Sprintf("sandbox: probe: %d message %d: %s", tc.status, tc.status, tc.kind.Message)
		if err.Error() != want || StatusCode(err) != tc.status {
			t.Errorf("%d: %q (status %d), want %q", tc.status, err, StatusCode(err), want)
		}
	}
	for _, tc := range cases[:13] {
		if got := HTTPStatus(fmt.Errorf("wrapped: %w", tc.kind)); HTTPStatus(tc.kind) != got || kindOf(got) != tc.kind {
			t.Errorf("HTTPStatus(%v) = %d, which reads back as %v", tc.kind, got, kindOf(got))
		}
	}
	if HTTPStatus(ErrUnavailable) != 503 || HTTPStatus(errors.New("other")) != 500 {
		t.Errorf("HTTPStatus: unavailable %d, other %d; want 503, 500", HTTPStatus(ErrUnavailable), HTTPStatus(errors.New("other")))
	}
}

// TestErrorMessage checks the error text callers and logs see, including bodies that are not the
// contract's shape (a proxy's page) and Retry-After.
func TestErrorMessage(t *testing.T) {
	body, retryAfter, status := `{"error":"unknown size \"huge\""}`, "", 400
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	defer srv.Close()
	c := NewHTTP(srv.URL, "", srv.Client())
	_, err := c.claimAt(t.Context(), "", ClaimRequest{Template: "base", Size: "huge"})
	if got, want := fmt.Sprint(err), `sandbox: claim: 400 unknown size "huge": invalid`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// At the edge it is a domain error: the sentinel's code, the engine's words.
	if code, msg := cocoonbox.ErrorCode(err), cocoonbox.ErrorMessage(err); code != cocoonbox.EInvalid ||
		msg != `sandbox engine: claim: unknown size "huge"` {
		t.Errorf("domain error: %s %q", code, msg)
	}
	if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrUpgradeRequired) {
		t.Error("errors.Is no longer tells the engine's answers apart")
	}

	body, status, retryAfter = "<html>Bad Gateway</html>", 503, "7"
	err = c.do(t.Context(), call{op: "info", method: http.MethodGet, path: "/v1/info"})
	if got, want := fmt.Sprint(err), "sandbox: info: 503 <html>Bad Gateway</html> (retry after 7s): unavailable"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if RetryAfter(err) != 7*time.Second || RetryAfter(errors.New("x")) != 0 {
		t.Errorf("RetryAfter: %v", RetryAfter(err))
	}

	if err := invalid("claim", "claim_ref is required"); err.Error() != "sandbox: claim: claim_ref is required: invalid" {
		t.Errorf("client-side refusal: %q", err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":                              0,
		"3":                             3 * time.Second,
		" 120 ":                         2 * time.Minute,
		"-1":                            0,
		"soon":                          0,
		"Fri, 02 Jan 2026 03:04:35 GMT": 30 * time.Second,
		"Fri, 02 Jan 2026 03:00:00 GMT": 0, // in the past
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestTTLSeconds(t *testing.T) {
	for in, want := range map[time.Duration]int{
		0: 0, time.Second: 1, 1500 * time.Millisecond: 2, 10 * time.Minute: 600,
		-time.Second: -1, -time.Millisecond: -1,
	} {
		if got := ttlSeconds(in); got != want {
			t.Errorf("ttlSeconds(%v) = %d, want %d", in, got, want)
		}
	}
}

// TestUncertain checks which failures may hide a claim that landed.
func TestUncertain(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	read := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset")}
	cases := []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("sandbox: claim: %w", dial), false}, // never connected: nothing was sent
		{fmt.Errorf("sandbox: claim: %w", read), true},
		{io.ErrUnexpectedEOF, true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{&Error{Status: 400, Kind: ErrInvalid}, false},
		{&Error{Status: 429, Kind: ErrNoCapacity}, false},
		{&Error{Status: 500, Kind: ErrInternal}, true},
		{&Error{Status: 501, Kind: ErrUnimplemented}, false},
		{&Error{Status: 504, Kind: ErrTimeout}, true},
		{&Error{Op: "claim", Kind: ErrInvalid}, false},
		{fmt.Errorf("x: %w", &Error{Status: 503, Kind: ErrUnavailable}), true},
	}
	for _, tc := range cases {
		if got := uncertain(tc.err); got != tc.want {
			t.Errorf("uncertain(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7777":         "http://127.0.0.1:7777",
		"http://engine:7777/":    "http://engine:7777",
		"https://sandboxd.local": "https://sandboxd.local",
	} {
		c := NewHTTP(in, "", nil)
		if c.baseErr != nil || c.base.String() != want {
			t.Errorf("NewHTTP(%q): base %v, err %v; want %s", in, c.base, c.baseErr, want)
		}
	}
	c := NewHTTP("ftp://nope", "", nil)
	if _, err := c.Info(t.Context()); err == nil {
		t.Errorf("a client with a bad base URL answered without error")
	}
	if u, _ := NewHTTP("https://a:1", "", nil).nodeURL("10.0.0.6:7777"); u.String() != "https://10.0.0.6:7777" {
		t.Errorf("a bare redirect target takes the base scheme: got %v", u)
	}
}
