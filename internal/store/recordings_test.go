package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestExpiredRecordings: a recording is past its retention once older than the age bound, or
// beyond its box's newest bytes bound; one still recording never is.
func TestExpiredRecordings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	box := newBox(t, st, alice, "dev")
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"run_a", "run_b", "run_c", "run_d"} {
		if _, err := st.CreateAgentRun(ctx, store.NewAgentRun{ID: id, BoxID: box.ID, Owner: alice, Task: "t", Provider: "openai", Model: "m"}); err != nil {
			t.Fatal(err)
		}
		rec := store.Recording{RunID: id, BoxID: box.ID, StartedAt: t0.Add(time.Duration(i) * time.Hour), Chunks: 1, Bytes: 100}
		if id != "run_d" { // run_d still records
			end := rec.StartedAt.Add(time.Minute)
			rec.Ended = &end
		}
		if err := st.PutRecording(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(recs []store.Recording, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.RunID)
		}
		return out
	}
	if got := ids(st.ExpiredRecordings(ctx, t0.Add(90*time.Minute), 0, 10)); len(got) != 2 || got[0] != "run_a" || got[1] != "run_b" {
		t.Fatalf("older than 1h30 after t0: %v", got)
	}
	if got := ids(st.ExpiredRecordings(ctx, time.Time{}, 250, 10)); len(got) != 1 || got[0] != "run_a" {
		t.Fatalf("beyond 250 bytes a box: %v", got)
	}
	if got := ids(st.ExpiredRecordings(ctx, t0.Add(10*time.Hour), 0, 10)); len(got) != 3 {
		t.Fatalf("a recording still under way expired: %v", got)
	}
	if err := st.DeleteRecording(ctx, "run_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordingOfRun(ctx, "run_a"); err == nil {
		t.Fatal("a deleted recording is still there")
	}
}
