package worker

import (
	"context"
	"testing"

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
