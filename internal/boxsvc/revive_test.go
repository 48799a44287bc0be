package boxsvc_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// TestReviveMissingWorkflow: a box whose row says it exists while Temporal has no workflow for it
// (a deployment restored onto a new Temporal) gets one at the first call that asks: asleep, with
// the policy kept on its row, and an event saying so. A deleted box is not revived.
func TestReviveMissingWorkflow(t *testing.T) {
	t.Parallel()
	e := newBoxEnv(t)
	ctx := context.Background()
	e.temporal.mu.Lock()
	delete(e.temporal.status, workflows.BoxWorkflowID(e.box))
	e.temporal.starts = true
	e.temporal.mu.Unlock()
	kept, err := json.Marshal(workflows.Policy{IdleAfter: 42 * time.Minute, DurableHibernate: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetBoxPolicy(ctx, e.box, kept); err != nil {
		t.Fatal(err)
	}

	v, err := e.svc.Get(ctx, e.users[cocoonbox.RoleViewer], e.box)
	if err != nil || v.State != cocoonbox.BoxStateHibernated || v.Policy.IdleAfter != 42*time.Minute {
		t.Fatalf("Get of a box without a workflow: %+v, %v; want it revived asleep with its policy", v.Status, err)
	}
	e.temporal.mu.Lock()
	started := e.temporal.started
	e.temporal.mu.Unlock()
	if len(started) != 1 || started[0].State == nil || started[0].State.SandboxID != "" || started[0].Owner != e.users[cocoonbox.RoleOwner] {
		t.Fatalf("started %+v, want one workflow of the owner's box, asleep without a sandbox", started)
	}
	events, err := e.st.EventsForBox(ctx, string(e.box), 10)
	if err != nil || len(events) == 0 || events[0].Action != "box.revived" {
		t.Fatalf("events %+v, %v; want box.revived", events, err)
	}

	// A box whose workflow ended (an operator terminated it) is not started again: Temporal
	// still has the workflow, and the reconciler marks the box failed.
	ended := cocoonbox.NewBoxID()
	if _, err := e.st.CreateBox(ctx, store.NewBox{ID: ended, Owner: e.users[cocoonbox.RoleOwner], Name: "ended", Size: cocoonbox.SizeSmall}); err != nil {
		t.Fatal(err)
	}
	e.temporal.mu.Lock()
	e.temporal.ended = map[string]bool{workflows.BoxWorkflowID(ended): true}
	e.temporal.mu.Unlock()
	if _, err := e.svc.Get(ctx, e.users[cocoonbox.RoleOwner], ended); cocoonbox.ErrorCode(err) != cocoonbox.ENotFound {
		t.Fatalf("Get of a box whose workflow ended: %v, want not found", err)
	}
	if len(e.temporal.started) != 1 {
		t.Fatalf("a box whose workflow ended was started again: %d starts", len(e.temporal.started))
	}

	// A deleted box stays gone, whatever Temporal has.
	if err := e.st.MarkBoxDeleted(ctx, e.box); err != nil {
		t.Fatal(err)
	}
	e.temporal.mu.Lock()
	delete(e.temporal.status, workflows.BoxWorkflowID(e.box))
	e.temporal.mu.Unlock()
	if _, err := e.svc.Get(ctx, e.users[cocoonbox.RoleOwner], e.box); cocoonbox.ErrorCode(err) != cocoonbox.ENotFound {
		t.Fatalf("Get of a deleted box: %v, want not found", err)
	}
	if len(e.temporal.started) != 1 {
		t.Fatalf("a deleted box was revived: %d starts", len(e.temporal.started))
	}
}
