package activities_test

import (
	"context"
	"testing"

	"go.temporal.io/sdk/testsuite"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/store"
)

// oneAttempts is an attempts store holding one best-of-N run.
type oneAttempts struct {
	activities.AttemptsStore
	att store.Attempts
}

func (o oneAttempts) AttemptsByID(context.Context, string) (store.Attempts, error) { return o.att, nil }

// TestAdoptAttemptKeysEachTry: the updates of an accept sent after one whose adopt failed are
// keyed anew (a box workflow answers an update ID it saw with its first outcome), while a
// retried activity of one accept sends the same key.
func TestAdoptAttemptKeysEachTry(t *testing.T) {
	var keys []string
	a := &activities.Attempts{
		Store: oneAttempts{att: store.Attempts{ID: "att_1", BoxID: "bx_0000000000000001",
			Forks: []cocoonbox.BoxID{"bx_00000000000000f1", "bx_00000000000000f2"}}},
		Adopt: func(_ context.Context, box, from cocoonbox.BoxID, key string) error {
			keys = append(keys, string(box)+"<"+string(from)+" "+key)
			return nil
		},
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	for _, in := range []activities.AdoptAttemptInput{{ID: "att_1", Choice: 2}, {ID: "att_1", Choice: 2}, {ID: "att_1", Choice: 1, Try: 1}} {
		if _, err := env.ExecuteActivity(a.AdoptAttempt, in); err != nil {
			t.Fatalf("AdoptAttempt(%+v): %v", in, err)
		}
	}
	want := []string{
		"bx_0000000000000001<bx_00000000000000f2 adopt-att_1",
		"bx_0000000000000001<bx_00000000000000f2 adopt-att_1",
		"bx_0000000000000001<bx_00000000000000f1 adopt-att_1/1",
	}
	if len(keys) != len(want) {
		t.Fatalf("keys = %q, want %q", keys, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Errorf("key %d = %q, want %q", i, keys[i], want[i])
		}
	}
	if _, err := env.ExecuteActivity(a.AdoptAttempt, activities.AdoptAttemptInput{ID: "att_1", Choice: 3}); err == nil {
		t.Errorf("AdoptAttempt of attempt 3 of 2 succeeded")
	}
}
