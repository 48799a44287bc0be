package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
)

// TestQuotaIsResourceExhausted checks the gRPC end of resource_exhausted: RESOURCE_EXHAUSTED
// with the message naming the limit, and a QuotaFailure detail that tells a quota apart from an
// engine out of capacity (same gRPC code, worth retrying).
func TestQuotaIsResourceExhausted(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, _ := status.FromError(toStatus(context.Background(), log, "/x", cocoonbox.QuotaReached("boxes per user", 3)))
	if st.Code() != codes.ResourceExhausted || st.Message() != "quota: boxes per user (3) reached" {
		t.Fatalf("quota: %v %q", st.Code(), st.Message())
	}
	var quota bool
	for _, d := range st.Details() {
		_, quota = d.(*errdetails.QuotaFailure)
	}
	if !quota {
		t.Fatalf("quota status has no QuotaFailure detail: %v", st.Details())
	}
	st, _ = status.FromError(toStatus(context.Background(), log, "/x", cocoonbox.Errorf(cocoonbox.ENoCapacity, "full")))
	if st.Code() != codes.ResourceExhausted || len(st.Details()) != 0 {
		t.Fatalf("no capacity: %v %v", st.Code(), st.Details())
	}
}

// TestInvalidNamesTheField: an invalid argument reaches a gRPC client with a BadRequest detail
// naming the field, so a client can point at it without parsing the message.
func TestInvalidNamesTheField(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := cocoonbox.RenameField(cocoonbox.BoxID("nope").Validate(), "box_id", "box")
	st, _ := status.FromError(toStatus(context.Background(), log, "/x", err))
	if st.Code() != codes.InvalidArgument || st.Message() != `box: must be bx_ followed by 16 lowercase hex digits, got "nope"` {
		t.Fatalf("invalid: %v %q", st.Code(), st.Message())
	}
	var field string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) == 1 {
			field = br.GetFieldViolations()[0].GetField()
		}
	}
	if field != "box" {
		t.Fatalf("BadRequest field = %q, want box (details %v)", field, st.Details())
	}
}

// TestACallerThatWentIsNotAnInternalError: a call whose caller hung up (a shell closed while its
// output was on the way) or whose deadline passed ends with its context's error; that is
// CANCELLED or DEADLINE_EXCEEDED, and no "internal error" is logged for it. A context error of
// the server's own, with the caller still there, is still an internal error.
func TestACallerThatWentIsNotAnInternalError(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	hungUp, cancel := context.WithCancel(context.Background())
	cancel()
	late, cancelLate := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelLate()
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want codes.Code
	}{
		{hungUp, fmt.Errorf("shell: %w", context.Canceled), codes.Canceled},
		{late, fmt.Errorf("shell: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
	} {
		if got := status.Code(toStatus(c.ctx, log, "/x", c.err)); got != c.want {
			t.Errorf("%v with the caller's context done: %v, want %v", c.err, got, c.want)
		}
	}
	if logged.Len() > 0 {
		t.Errorf("logged for a caller that went: %s", logged.String())
	}
	if got := status.Code(toStatus(context.Background(), log, "/x", context.Canceled)); got != codes.Internal || logged.Len() == 0 {
		t.Errorf("a context error of the server's own: %v, logged %q; want internal, logged", got, logged.String())
	}
}
