package devstack_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/workflows"
)

// TestBoxLifecycleThroughWorkflow drives one box through its workflow against the embedded
// Temporal server, PostgreSQL and the local engine with gVisor: create → running → hibernate →
// wake with its files intact → delete, checking the engine and the store at each step.
func TestBoxLifecycleThroughWorkflow(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, eng := newBoxEnv(t, boxConfig(t), 3*time.Minute)

	id := cocoonbox.NewBoxID()
	req := boxsvc.CreateRequest{ID: id, Name: "work", Size: cocoonbox.SizeSmall}
	st, err := d.Boxes.Create(ctx, owner.ID, req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if st.State != cocoonbox.BoxStateRunning || st.SandboxID == "" {
		t.Fatalf("after create: %+v", st)
	}
	again, err := d.Boxes.Create(ctx, owner.ID, req)
	if err != nil || again.SandboxID != st.SandboxID {
		t.Fatalf("double create: %+v, %v; want the same box and sandbox", again, err)
	}
	if rows, err := eng.List(ctx, ""); err != nil || len(rows) != 1 {
		t.Fatalf("engine sandboxes after a double create: %+v, %v; want exactly one", rows, err)
	}
	row, err := eng.Get(ctx, st.SandboxID)
	if err != nil || row.Hibernated {
		t.Fatalf("engine row: %+v, %v", row, err)
	}
	ref := sandbox.SandboxRef{ID: st.SandboxID, Token: row.Token}
	if res, err := eng.Exec(ctx, ref, sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo kept > /root/f"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write a file: %+v, %v", res, err)
	}

	if st, err = d.Boxes.Hibernate(ctx, owner.ID, id); err != nil || st.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("hibernate: %+v, %v", st, err)
	}
	if row, err := eng.Get(ctx, st.SandboxID); err != nil || !row.Hibernated {
		t.Fatalf("engine after hibernate: %+v, %v; want hibernated", row, err)
	}
	if b, err := d.Store.BoxByID(ctx, id); err != nil || b.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("row after hibernate: %+v, %v", b, err)
	}

	// Two wakes at once: both answer running, and the engine woke the sandbox once.
	wakes := make(chan error, 2)
	for range 2 {
		go func() {
			st, err := d.Boxes.Wake(ctx, owner.ID, id)
			if err == nil && st.State != cocoonbox.BoxStateRunning {
				err = fmt.Errorf("state %s", st.State)
			}
			wakes <- err
		}()
	}
	for range 2 {
		if err := <-wakes; err != nil {
			t.Fatalf("concurrent wake: %v", err)
		}
	}
	if n := usageEvents(t, d.Home(), "wake", st.SandboxID); n != 1 {
		t.Fatalf("engine wakes after two concurrent wake updates: %d, want 1", n)
	}
	if res, err := eng.Exec(ctx, ref, sandbox.ExecRequest{Argv: []string{"cat", "/root/f"}}); err != nil || res.Stdout != "kept\n" {
		t.Fatalf("file after wake: %+v, %v", res, err)
	}

	// Someone else's box reads as not found, and nothing changes.
	stranger, err := d.Store.CreateUser(ctx, storeUser("mallory"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Boxes.Hibernate(ctx, stranger.ID, id); cocoonbox.ErrorCode(err) != cocoonbox.ENotFound {
		t.Fatalf("a stranger's hibernate: %v, want not found", err)
	}

	if st, err = d.Boxes.Delete(ctx, owner.ID, id); err != nil || st.State != cocoonbox.BoxStateDeleted {
		t.Fatalf("delete: %+v, %v", st, err)
	}
	if _, err := eng.Get(ctx, row.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("engine after delete: %v, want the sandbox released", err)
	}
	if b, err := d.Store.BoxByID(ctx, id); err != nil || b.State != cocoonbox.BoxStateDeleted {
		t.Fatalf("row after delete: %+v, %v", b, err)
	}
	desc, err := d.Temporal.DescribeWorkflowExecution(ctx, workflows.BoxWorkflowID(id), "")
	if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("workflow after delete: %v, %v", desc.GetWorkflowExecutionInfo().GetStatus(), err)
	}
	if _, err := d.Boxes.Wake(ctx, owner.ID, id); err == nil {
		t.Fatal("waking a deleted box succeeded")
	}
}
