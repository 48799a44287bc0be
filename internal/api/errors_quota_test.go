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
