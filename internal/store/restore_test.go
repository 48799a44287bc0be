package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestAfterRestore: a restored database is fitted to new engines in one go: every box that is not
// deleted sleeps without a sandbox and says why, unfinished runs fail, finished ones and deleted
// boxes are left alone, and the node records go.
func TestAfterRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	running, gone := newBox(t, st, alice, "dev").ID, newBox(t, st, alice, "old").ID
	if err := st.SetBoxState(ctx, running, cocoonbox.BoxStateRunning, "sb_0123456789abcdef", ""); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkBoxDeleted(ctx, gone); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"run_open", "run_done"} {
		if _, err := st.CreateAgentRun(ctx, store.NewAgentRun{ID: id, BoxID: running, Owner: alice, Task: "t", Provider: "openai", Model: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetAgentRunState(ctx, "run_done", cocoonbox.AgentRunSucceeded, ""); err != nil {
		t.Fatal(err)
	}

	r, err := st.AfterRestore(ctx, "restored from the drill")
	if err != nil || r.Boxes != 1 || r.Runs != 1 {
		t.Fatalf("AfterRestore = %+v, %v; want 1 box and 1 run", r, err)
	}
	b, err := st.BoxByID(ctx, running)
	if err != nil || b.State != cocoonbox.BoxStateHibernated || b.SandboxID != "" {
		t.Fatalf("box after restore: %+v, %v", b, err)
	}
	if b, _ := st.BoxByID(ctx, gone); b.State != cocoonbox.BoxStateDeleted {
		t.Fatalf("deleted box after restore: %s", b.State)
	}
	if open, _ := st.AgentRunByID(ctx, "run_open"); open.State != cocoonbox.AgentRunFailed || open.Error == "" {
		t.Fatalf("unfinished run after restore: %+v", open)
	}
	if done, _ := st.AgentRunByID(ctx, "run_done"); done.State != cocoonbox.AgentRunSucceeded {
		t.Fatalf("finished run after restore: %+v", done)
	}
	// The box ran when the dump was taken; asleep after the restore, it runs no more hours.
	before, err := st.UserBudget(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if after, err := st.UserBudget(ctx, alice); err != nil || after.BoxHoursUsed != before.BoxHoursUsed {
		t.Fatalf("the restored box's hours grew while it slept: %v then %v, %v", before.BoxHoursUsed, after.BoxHoursUsed, err)
	}
	events, err := st.EventsForBox(ctx, string(running), 10)
	if err != nil || len(events) == 0 || events[0].Action != "box.restored" {
		t.Fatalf("box events after restore: %+v, %v", events, err)
	}
}

// TestLoseSnapshots: snapshots whose objects are gone fail, with every snapshot built on them,
// and the others stay complete.
func TestLoseSnapshots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	box := newBox(t, st, alice, "dev").ID
	keep := newSnapshot(t, st, box, 1, cocoonbox.SnapshotComplete)
	base := newSnapshot(t, st, box, 2, cocoonbox.SnapshotComplete)
	on, err := st.BeginSnapshot(ctx, store.NewSnapshot{ID: snapID(3), BoxID: box, BaseID: base.ID, ObjectKey: "snapshots/" + snapID(3)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CompleteSnapshot(ctx, on.ID, 3, sum(on.ID), 3); err != nil {
		t.Fatal(err)
	}
	lost, err := st.LoseSnapshots(ctx, []string{base.ID})
	slices.Sort(lost)
	if err != nil || !slices.Equal(lost, []string{base.ID, on.ID}) {
		t.Fatalf("LoseSnapshots = %v, %v; want %s and the one built on it", lost, err, base.ID)
	}
	complete, err := st.CompleteSnapshots(ctx)
	if err != nil || len(complete) != 1 || complete[0].ID != keep.ID {
		t.Fatalf("complete after: %+v, %v", complete, err)
	}
}
