package devstack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// TestRequestIDMakesOneOperation: a snapshot sent again with the same request_id (as the CLI
// does when the API did not answer) is the first one, not a second snapshot; another request ID
// is another snapshot, and another user's same ID is theirs; a bad request_id is refused naming
// the field, before anything is done.
func TestRequestIDMakesOneOperation(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, _ := newBoxEnv(t, boxConfig(t), 5*time.Minute)
	e, token := devAPI(t, d)
	id := cocoonbox.NewBoxID()
	if _, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: id, Name: "once", Size: cocoonbox.SizeSmall}); err != nil {
		t.Fatal(err)
	}
	as := e.as(ctx, token)
	snap := func(ctx context.Context, rid string) string {
		t.Helper()
		s, err := e.box.SnapshotBox(ctx, &cbv1.SnapshotBoxRequest{Box: string(id), RequestId: rid})
		if err != nil || s.GetState() != "complete" {
			t.Fatalf("snapshot %q: %v, %v", rid, s, err)
		}
		return s.GetId()
	}
	first := snap(as, "cli-0001")
	if again := snap(as, "cli-0001"); again != first {
		t.Errorf("the resent snapshot is %s, want the first, %s", again, first)
	}
	if other := snap(as, "cli-0002"); other == first {
		t.Errorf("another request ID answered the first snapshot %s", first)
	}
	// A driver sharing the box, with the owner's request ID: an operation of their own.
	driver, driverTok := e.user(ctx, t, "driver")
	if _, err := d.Boxes.Share(ctx, owner.ID, id, driver.Name, cocoonbox.RoleDriver, nil); err != nil {
		t.Fatal(err)
	}
	if theirs := snap(e.as(ctx, driverTok), "cli-0001"); theirs == first {
		t.Errorf("another user's request ID answered the owner's snapshot %s", first)
	}
	snaps, err := d.Store.ListSnapshots(ctx, id)
	if err != nil || len(snaps) != 3 {
		t.Errorf("snapshots %v, %v; want 3 (one per request ID and user)", snaps, err)
	}
	_, err = e.box.SnapshotBox(as, &cbv1.SnapshotBoxRequest{Box: string(id), RequestId: "no spaces"})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "request_id") {
		t.Errorf("bad request_id: %v; want invalid naming request_id", err)
	}
	if after, _ := d.Store.ListSnapshots(ctx, id); len(after) != len(snaps) {
		t.Errorf("a refused request made a snapshot: %d → %d", len(snaps), len(after))
	}
}
