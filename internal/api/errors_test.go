package api

import (
	"context"
	"io"
	"log/slog"
	"testing"

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
