package devstack_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/workflows"
)

// TestWakeSurvivesKilledWorker is the acceptance check for a worker lost mid-operation: the
// worker runs in a child process and is SIGKILLed while the Wake activity runs; a new worker
// takes over, the wake completes once, and the engine holds exactly the box's sandbox, awake,
// with the file written before hibernate.
func TestWakeSurvivesKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.NoWorker = true
	d, ctx, owner, eng := newBoxEnv(t, cfg, 4*time.Minute)
	wcfg := workerConfig(d)
	first := startChildWorker(t, wcfg)

	id := cocoonbox.NewBoxID()
	st, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: id, Name: "work", Size: cocoonbox.SizeSmall})
	if err != nil || st.State != cocoonbox.BoxStateRunning {
		t.Fatalf("create: %+v, %v", st, err)
	}
	row, err := eng.Get(ctx, st.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	ref := sandbox.SandboxRef{ID: st.SandboxID, Token: row.Token}
	if res, err := eng.Exec(ctx, ref, sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo kept > /root/f"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("write a file: %+v, %v", res, err)
	}
	if st, err := d.Boxes.Hibernate(ctx, owner.ID, id); err != nil || st.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("hibernate: %+v, %v", st, err)
	}

	type result struct {
		st  boxsvc.View
		err error
	}
	woke := make(chan result, 1)
	go func() {
		st, err := d.Boxes.Wake(ctx, owner.ID, id)
		woke <- result{st, err}
	}()
	// Kill the worker the moment the server reports the Wake activity started on it.
	started := false
	for !started {
		select {
		case r := <-woke:
			t.Fatalf("wake finished before the worker could be killed: %+v, %v", r.st, r.err)
		case <-ctx.Done():
			t.Fatal("the Wake activity never started")
		case <-time.After(10 * time.Millisecond):
		}
		desc, err := d.Temporal.DescribeWorkflowExecution(ctx, workflows.BoxWorkflowID(id), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, pa := range desc.GetPendingActivities() {
			if pa.GetActivityType().GetName() == "Wake" && pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED {
				started = true
			}
		}
	}
	first.kill()
	t.Logf("killed the worker with the Wake activity started")
	startChildWorker(t, wcfg)

	var r result
	select {
	case r = <-woke:
	case <-ctx.Done():
		t.Fatal("wake did not complete after the worker restarted")
	}
	if r.err != nil || r.st.State != cocoonbox.BoxStateRunning || r.st.SandboxID != ref.ID {
		t.Fatalf("wake after the kill: %+v, %v; want running on sandbox %s", r.st, r.err, ref.ID)
	}
	rows, err := eng.List(ctx, "")
	if err != nil || len(rows) != 1 || rows[0].ID != ref.ID || rows[0].Hibernated {
		t.Fatalf("engine sandboxes: %+v, %v; want exactly %s, awake", rows, err, ref.ID)
	}
	if res, err := eng.Exec(ctx, ref, sandbox.ExecRequest{Argv: []string{"cat", "/root/f"}}); err != nil || res.Stdout != "kept\n" {
		t.Fatalf("file after wake: %+v, %v", res, err)
	}
	if b, err := d.Store.BoxByID(ctx, id); err != nil || b.State != cocoonbox.BoxStateRunning {
		t.Fatalf("row after wake: %+v, %v", b, err)
	}
	if n := usageEvents(t, d.Home(), "wake", ref.ID); n != 1 {
		t.Fatalf("engine usage journal: %d wakes of %s, want 1 (a retried wake must be a no-op)", n, ref.ID)
	}
}

// usageEvents counts the engine usage journal's events of one kind for one sandbox.
func usageEvents(t *testing.T, home, event, sandboxID string) int {
	t.Helper()
	f, err := os.Open(filepath.Join(home, "engine", "usage.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e struct{ Event, ID string }
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("usage journal line %q: %v", sc.Text(), err)
		}
		if e.Event == event && e.ID == sandboxID {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
