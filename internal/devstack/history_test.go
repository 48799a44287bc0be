package devstack_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/workflows"
)

// writeHistoryEnv names the variable that turns TestWriteBoxHistory on.
const writeHistoryEnv = "COCOONBOX_WRITE_HISTORY"

// boxHistoryFile is the committed history workflows/replay_test.go replays.
var boxHistoryFile = filepath.Join("..", "..", "workflows", "testdata", "histories", "box_lifecycle.json")

// TestWriteBoxHistory is not a test of behaviour but the generator of the history the replay test
// in workflows/ replays: it drives a real box through its workflow on the dev stack (create,
// touch, viewers, a run's pin, take-over and hand-back, unpin, hibernate, wake, delete) and writes the workflow's history as JSON
// in the format WorkflowReplayer.ReplayWorkflowHistoryFromJSONFile reads. It is skipped unless
// COCOONBOX_WRITE_HISTORY=1, because it overwrites a committed file; regenerate it only when the
// workflow changes on purpose (and the old history no longer needs to replay):
//
//	COCOONBOX_WRITE_HISTORY=1 go test -run TestWriteBoxHistory ./internal/devstack/
func TestWriteBoxHistory(t *testing.T) {
	if v, _ := config.Env()(writeHistoryEnv); v != "1" {
		t.Skipf("generator: set %s=1 to rewrite %s", writeHistoryEnv, boxHistoryFile)
	}
	d := startDev(t, testConfig(t, filepath.Join(shortTemp(t), "h")))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	owner, err := d.Store.UserByName(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	id := cocoonbox.BoxID("bx_0123456789abcdef") // fixed, so the history diffs stay small
	if _, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: id, Name: "replay", Size: cocoonbox.SizeSmall}); err != nil {
		t.Fatalf("create: %v", err)
	}
	wid := workflows.BoxWorkflowID(id)
	signals := []struct {
		name string
		arg  any
	}{
		{workflows.SignalTouch, struct{}{}},
		{workflows.SignalViewers, workflows.ViewersSignal{Count: 1}},
		{workflows.SignalPin, workflows.PinSignal{Ref: "run-1", Run: true}},
	}
	for _, s := range signals {
		if err := d.Temporal.SignalWorkflow(ctx, wid, "", s.name, s.arg); err != nil {
			t.Fatalf("signal %s: %v", s.name, err)
		}
	}
	// The pinning "run" is told of the lease changing hands (it is no workflow: the signals
	// fail, which the box only logs).
	if _, err := d.Boxes.TakeOver(ctx, owner.ID, id); err != nil {
		t.Fatalf("take over: %v", err)
	}
	if _, err := d.Boxes.HandBack(ctx, owner.ID, id); err != nil {
		t.Fatalf("hand back: %v", err)
	}
	for _, s := range []struct {
		name string
		arg  any
	}{
		{workflows.SignalUnpin, workflows.PinSignal{Ref: "run-1"}},
		{workflows.SignalViewers, workflows.ViewersSignal{Count: 0}},
	} {
		if err := d.Temporal.SignalWorkflow(ctx, wid, "", s.name, s.arg); err != nil {
			t.Fatalf("signal %s: %v", s.name, err)
		}
	}
	if _, err := d.Boxes.Hibernate(ctx, owner.ID, id); err != nil {
		t.Fatalf("hibernate: %v", err)
	}
	if _, err := d.Boxes.Wake(ctx, owner.ID, id); err != nil {
		t.Fatalf("wake: %v", err)
	}
	if _, err := d.Boxes.Delete(ctx, owner.ID, id); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := d.Temporal.GetWorkflow(ctx, wid, "").Get(ctx, nil); err != nil {
		t.Fatalf("workflow result: %v", err)
	}
	writeHistory(ctx, t, d, wid, boxHistoryFile)
}

// TestWriteSnapshotHistory generates the replay histories of the snapshot paths: a box that is
// snapshotted, loses its sandbox while hibernated and is rebuilt from the snapshot at wake,
// restored explicitly, hibernated under the durable policy and deleted with its snapshots; and
// one snapshot child workflow. Like TestWriteBoxHistory it runs only with COCOONBOX_WRITE_HISTORY=1.
func TestWriteSnapshotHistory(t *testing.T) {
	if v, _ := config.Env()(writeHistoryEnv); v != "1" {
		t.Skipf("generator: set %s=1 to rewrite the snapshot histories", writeHistoryEnv)
	}
	d, ctx, owner, eng := newBoxEnv(t, boxConfig(t), 3*time.Minute)
	id := cocoonbox.BoxID("bx_00000000000000aa")
	st, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: id, Name: "snapshots", Size: cocoonbox.SizeSmall})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	snap, err := d.Boxes.Snapshot(ctx, owner.ID, id)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if _, err := d.Boxes.Hibernate(ctx, owner.ID, id); err != nil {
		t.Fatalf("hibernate: %v", err)
	}
	if err := eng.Release(ctx, sandbox.SandboxRef{ID: st.SandboxID}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Boxes.Wake(ctx, owner.ID, id); err != nil {
		t.Fatalf("wake from the snapshot: %v", err)
	}
	if _, err := d.Boxes.Restore(ctx, owner.ID, id, snap.Snapshot.ID); err != nil {
		t.Fatalf("restore: %v", err)
	}
	p := st.Policy
	p.DurableHibernate = true
	if _, err := d.Boxes.SetPolicy(ctx, owner.ID, id, p); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Boxes.Hibernate(ctx, owner.ID, id); err != nil {
		t.Fatalf("durable hibernate: %v", err)
	}
	if _, err := d.Boxes.DeleteWith(ctx, owner.ID, id, workflows.DeleteInput{PurgeSnapshots: true}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	wid := workflows.BoxWorkflowID(id)
	if err := d.Temporal.GetWorkflow(ctx, wid, "").Get(ctx, nil); err != nil {
		t.Fatalf("workflow result: %v", err)
	}
	dir := filepath.Dir(boxHistoryFile)
	writeHistory(ctx, t, d, wid, filepath.Join(dir, "box_snapshots.json"))
	writeHistory(ctx, t, d, workflows.SnapshotWorkflowID(snap.Snapshot.ID), filepath.Join(dir, "snapshot.json"))
}

// writeHistory writes workflow wid's history as JSON in the format
// WorkflowReplayer.ReplayWorkflowHistoryFromJSONFile reads.
func writeHistory(ctx context.Context, t *testing.T, d *devstack.Dev, wid, file string) {
	t.Helper()
	var hist historypb.History
	it := d.Temporal.GetWorkflowHistory(ctx, wid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("read history: %v", err)
		}
		hist.Events = append(hist.Events, ev)
	}
	out, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(&hist)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", file, len(out))
}
