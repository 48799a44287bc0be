package devstack_test

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/workflows"
)

// wakeHistoryBudget is how many events one wake of a hibernated box may add to its workflow's
// history: the update, the engine wake and ready probe, and the state writes. History is what
// Temporal stores and every replay reads, and a box wakes many times a day; a change that makes a
// wake heavier fails here rather than shortening the box's runs between continue-as-new. A wake
// wrote 32 events while the row writes were activities, 22 since they are local activities (the
// slack is for a version marker a run's first wake may record).
const wakeHistoryBudget = 24

// TestWakeHistoryEvents wakes a hibernated box on the dev stack and counts the events the wake
// added to the box workflow's history.
func TestWakeHistoryEvents(t *testing.T) {
	d, ctx, owner, _ := newBoxEnv(t, boxConfig(t), 3*time.Minute)
	st, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{Name: "wake-history", Size: cocoonbox.SizeSmall})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	id := st.BoxID
	t.Cleanup(func() { _, _ = d.Boxes.Delete(context.Background(), owner.ID, id) })
	if _, err := d.Boxes.Hibernate(ctx, owner.ID, id); err != nil {
		t.Fatalf("hibernate: %v", err)
	}
	waitSealed(ctx, t, d, owner.ID, id) // the seal's own events are not the wake's
	var events []string                 // every event's type and time, for the log
	count := func() int {
		events = events[:0]
		it := d.Temporal.GetWorkflowHistory(ctx, workflows.BoxWorkflowID(id), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, ev.GetEventTime().AsTime().Format("15:04:05.000")+" "+ev.GetEventType().String())
		}
		return len(events)
	}
	before := count()
	if st, err := d.Boxes.Wake(ctx, owner.ID, id); err != nil || st.State != cocoonbox.BoxStateRunning {
		t.Fatalf("wake: %v %v", st.State, err)
	}
	// The update returns once the workflow task completing it is in history.
	wrote := count() - before
	for _, ev := range events[before:] {
		t.Log(ev)
	}
	t.Logf("one wake wrote %d history events (budget %d)", wrote, wakeHistoryBudget)
	if wrote > wakeHistoryBudget {
		t.Errorf("one wake wrote %d history events, over the budget of %d", wrote, wakeHistoryBudget)
	}
}
