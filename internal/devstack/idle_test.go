package devstack_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/testutil"
	"github.com/loomhand/cocoonbox/workflows"
)

// waitIdle bounds how long a box with a 2 s idle period may take to hibernate by itself: the
// timer, a workflow task and a gVisor checkpoint on a shared machine.
const waitIdle = time.Minute

// TestIdleBoxHibernates checks work-aware idle end to end: a box nobody watches hibernates by
// itself after its idle period, the engine agreeing; a box with a viewer stays running past the
// same period, and hibernates once its viewer leaves.
func TestIdleBoxHibernates(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, eng := newBoxEnv(t, boxConfig(t), 4*time.Minute)
	svc := &boxsvc.Service{Temporal: d.Temporal, Store: d.Store,
		Policy: workflows.Policy{IdleAfter: 2 * time.Second, LeaseTTL: time.Hour}}

	// The watched box is created first, so by the time the idle one hibernates the watched one
	// has been running without any operation for at least its idle period too.
	watched := cocoonbox.NewBoxID()
	if st, err := svc.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: watched, Name: "watched", Size: cocoonbox.SizeSmall}); err != nil || st.State != cocoonbox.BoxStateRunning {
		t.Fatalf("create watched: %+v, %v", st, err)
	}
	viewers := func(n int) {
		t.Helper()
		if err := d.Temporal.SignalWorkflow(ctx, workflows.BoxWorkflowID(watched), "", workflows.SignalViewers, workflows.ViewersSignal{Count: n}); err != nil {
			t.Fatalf("signal %d viewers: %v", n, err)
		}
	}
	viewers(1)
	idle := cocoonbox.NewBoxID()
	idleSt, err := svc.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: idle, Name: "idle", Size: cocoonbox.SizeSmall})
	if err != nil || idleSt.State != cocoonbox.BoxStateRunning {
		t.Fatalf("create idle: %+v, %v", idleSt, err)
	}

	hibernated := func(id cocoonbox.BoxID) func() error {
		return func() error {
			st, err := svc.Get(ctx, owner.ID, id)
			if err != nil {
				return err
			}
			if st.State != cocoonbox.BoxStateHibernated {
				return fmt.Errorf("box %s is %s", id, st.State)
			}
			if row, err := eng.Get(ctx, st.SandboxID); err != nil || !row.Hibernated {
				return fmt.Errorf("engine sandbox %s: %+v, %v; want hibernated", st.SandboxID, row, err)
			}
			return nil
		}
	}
	if err := testutil.Poll(ctx, waitIdle, hibernated(idle)); err != nil {
		t.Fatalf("idle box: %v", err)
	}
	if st, err := svc.Get(ctx, owner.ID, watched); err != nil || st.State != cocoonbox.BoxStateRunning {
		t.Fatalf("box with a viewer after the idle period: %+v, %v; want running", st, err)
	}
	viewers(0)
	if err := testutil.Poll(ctx, waitIdle, hibernated(watched)); err != nil {
		t.Fatalf("box whose viewer left: %v", err)
	}
}
