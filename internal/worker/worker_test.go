package worker

import (
	"context"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// TestBoxEventsLand: every kind of event the box workflow records reaches the events table,
// hyphenated ones (a lost sandbox, a box rebuilt from its template) included, which the table's
// rule for actions refused before.
func TestBoxEventsLand(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t)
	b := boxes{st}
	kinds := []string{"hibernated", "restored", "snapshot", "network", "sandbox-replaced", "sandbox-lost",
		"sandbox-from-template", "snapshot-before-hibernate-failed"}
	for _, k := range kinds {
		if err := b.AppendEvent(ctx, "bx_00000000000000e1", k, "why"); err != nil {
			t.Errorf("event %s: %v", k, err)
		}
	}
	got, err := st.EventsForBox(ctx, "bx_00000000000000e1", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(kinds) || got[0].Action != "box.snapshot_before_hibernate_failed" {
		t.Fatalf("events: %+v", got)
	}
}

// TestStateAndEventLandTogether: the state a hibernate or a wake ends in and its event are one
// write: both land, or neither does, when the event is refused or the row cannot be moved (a
// deleted box).
func TestStateAndEventLandTogether(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t)
	b := boxes{st}
	u, err := st.CreateUser(ctx, store.NewUser{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	const id = cocoonbox.BoxID("bx_00000000000000e2")
	if err := b.CreateBox(ctx, cocoonbox.Box{ID: id, Owner: u.ID, Name: "one", Size: cocoonbox.SizeSmall}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetBoxStateWithEvent(ctx, id, cocoonbox.BoxStateHibernated, "sb_00000000000000e2", "", "hibernated", "idle"); err != nil {
		t.Fatal(err)
	}
	if err := b.SetBoxStateWithEvent(ctx, id, cocoonbox.BoxStateRunning, "", "", "Not A Kind", ""); err == nil {
		t.Fatal("an event the table refuses was written")
	}
	if row, err := st.BoxByID(ctx, id); err != nil || row.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("box after a refused event: %+v, %v; want it hibernated still", row, err)
	}
	if err := st.MarkBoxDeleted(ctx, id); err != nil {
		t.Fatal(err)
	}
	err = b.SetBoxStateWithEvent(ctx, id, cocoonbox.BoxStateRunning, "", "", "woke", "requested")
	if cocoonbox.ErrorCode(err) != cocoonbox.EConflict {
		t.Fatalf("moving a deleted box: %v, want a conflict", err)
	}
	got, err := st.EventsForBox(ctx, string(id), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Action != "box.hibernated" || !strings.Contains(string(got[0].Detail), "idle") {
		t.Fatalf("events: %+v, want the hibernated one alone", got)
	}
	row, err := st.BoxByID(ctx, id)
	if err != nil || row.DeletedAt == nil {
		t.Fatalf("box: %+v, %v; want it deleted still", row, err)
	}
}
