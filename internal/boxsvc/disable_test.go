package boxsvc_test

import (
	"context"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// TestCancelRunsOf: disabling a user tells each of their runs that has not ended to stop, and
// no one else's, nor their ended ones.
func TestCancelRunsOf(t *testing.T) {
	e := newBoxEnv(t)
	ctx := context.Background()
	owner, driver := e.users[cocoonbox.RoleOwner], e.users[cocoonbox.RoleDriver]
	run := func(id, who string) {
		t.Helper()
		if _, err := e.st.CreateAgentRun(ctx, store.NewAgentRun{ID: id, BoxID: e.box, Owner: who, Task: "t", Provider: "openai", Model: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	run("run_a1", owner)
	run("run_a2", owner)
	run("run_a3", owner)
	run("run_d1", driver)
	if err := e.st.SetAgentRunState(ctx, "run_a3", cocoonbox.AgentRunSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	n, err := e.svc.CancelRunsOf(ctx, owner, e.users[cocoonbox.RoleAdmin])
	if err != nil || n != 2 {
		t.Fatalf("CancelRunsOf = %d, %v; want the owner's two open runs", n, err)
	}
	if got := e.temporal.signals[workflows.SignalRunCancel]; got != 2 {
		t.Fatalf("%d cancel signals sent, want 2", got)
	}
}
