package devstack_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/testutil"
	"github.com/loomhand/cocoonbox/internal/worker"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
	"github.com/loomhand/cocoonbox/workflows"
)

// TestSnapshotWithS3Down is the acceptance check for an outage of the snapshot store: with the
// S3 server stopped (and not restarted), a snapshot call with a 15 s deadline returns within it,
// as unavailable, naming S3; the snapshot goes on in its workflow, and once S3 is back its row
// ends complete or failed, never left uploading, with no multipart upload left behind and the
// box's last error one line.
func TestSnapshotWithS3Down(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, _ := newBoxEnv(t, boxConfig(t), 6*time.Minute)
	id := cocoonbox.NewBoxID()
	if st, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: id, Name: "outage", Size: cocoonbox.SizeSmall}); err != nil || st.State != cocoonbox.BoxStateRunning {
		t.Fatalf("create: %+v, %v", st, err)
	}
	cli, err := config.LoadCLI(d.Bootstrap().CLIConfig, config.MapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(d.URLs().API, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	boxes := cbv1.NewBoxServiceClient(conn)

	if err := devstack.StopS3(d); err != nil {
		t.Fatal(err)
	}
	const deadline = 15 * time.Second
	callCtx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+cli.Token), deadline)
	start := time.Now()
	_, err = boxes.SnapshotBox(callCtx, &cbv1.SnapshotBoxRequest{Box: string(id)})
	cancel()
	took := time.Since(start)
	t.Logf("snapshot with S3 down answered after %s: %v", took.Round(time.Millisecond), err)
	s3Host := strings.TrimPrefix(d.URLs().S3, "http://")
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "snapshot store (S3 at "+s3Host+") is not answering") {
		t.Fatalf("snapshot with S3 down: %v; want unavailable naming S3 at %s", err, s3Host)
	}
	if took > deadline {
		t.Errorf("answered after %s, past the call's %s deadline", took, deadline)
	}

	if err := devstack.StartS3(ctx, d); err != nil {
		t.Fatal(err)
	}
	var ended, seen string
	testutil.Eventually(t, 4*time.Minute, "the snapshot to end complete or failed", func() bool {
		rows, err := d.Store.ListSnapshots(ctx, id)
		if err != nil || len(rows) != 1 {
			seen = fmt.Sprintf("rows %v, %v", rows, err)
			return false
		}
		ended = string(rows[0].State)
		seen = ended
		return rows[0].State != cocoonbox.SnapshotUploading
	}, &seen)
	testutil.Eventually(t, time.Minute, "the box to be running again", func() bool {
		st, err := d.Boxes.Get(ctx, owner.ID, id)
		seen = string(st.State)
		return err == nil && st.State == cocoonbox.BoxStateRunning
	}, &seen)
	st, err := d.Boxes.Get(ctx, owner.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(st.LastError, "\n") || len(st.LastError) > 300 {
		t.Errorf("last error is not one line: %q", st.LastError)
	}
	left, err := d.Blobs.ListIncomplete(ctx, "boxes/")
	if err != nil || len(left) != 0 {
		t.Errorf("multipart uploads left: %v, %v", left, err)
	}
	t.Logf("snapshot ended %s; last error %q", ended, st.LastError)
}

// TestReconcileStaleUploads: a snapshot row left uploading with no workflow working on it (as a
// stack killed between the row's write and the workflow's start leaves it) is marked failed by
// the reconciler, once it is older than the grace period and not before; a complete snapshot of
// the same box is untouched.
func TestReconcileStaleUploads(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, _ := newBoxEnv(t, boxConfig(t), 3*time.Minute)
	id := cocoonbox.NewBoxID()
	if _, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: id, Name: "stale", Size: cocoonbox.SizeSmall}); err != nil {
		t.Fatal(err)
	}
	good, err := d.Boxes.Snapshot(ctx, owner.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := d.Store.BeginSnapshot(ctx, store.NewSnapshot{ID: "sn_00000000000000aa", BoxID: id,
		ObjectKey: activities.SnapshotObjectKey(id, "sn_00000000000000aa")})
	if err != nil {
		t.Fatal(err)
	}
	rec := &worker.Reconciler{Temporal: d.Temporal, Store: d.Store, Logger: slog.New(slog.DiscardHandler)}
	if n, err := rec.Once(ctx); err != nil || n.Snapshots != 0 {
		t.Fatalf("reconcile within the grace period: %+v, %v; want nothing settled", n, err)
	}
	rec.Now = func() time.Time { return time.Now().Add(time.Hour) }
	if n, err := rec.Once(ctx); err != nil || n.Snapshots != 1 {
		t.Fatalf("reconcile: %+v, %v; want the orphan settled", n, err)
	}
	for want, sid := range map[cocoonbox.SnapshotState]string{cocoonbox.SnapshotFailed: orphan.ID, cocoonbox.SnapshotComplete: good.Snapshot.ID} {
		s, err := d.Store.SnapshotByID(ctx, sid)
		if err != nil || s.State != want {
			t.Errorf("snapshot %s: %s, %v; want %s", sid, s.State, err, want)
		}
	}
}

// TestReconcileOrphanSandboxes: sandboxes claimed for our boxes that no box holds (one under an
// earlier attempt of a live box, as a claim whose answer was lost leaves it; one for a box that
// does not exist, as a delete killed before its release leaves it) are released by the
// reconciler once past the grace period and not before; the box's own sandbox and a sandbox
// claimed under someone else's reference are untouched, and the box still runs commands.
func TestReconcileOrphanSandboxes(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, eng := newBoxEnv(t, boxConfig(t), 3*time.Minute)
	id, own := createBox(ctx, t, d, owner.ID, eng)
	claim := func(ref string) string {
		c, err := eng.Claim(ctx, sandbox.ClaimRequest{Template: "base", Size: sandbox.SizeSmall, ClaimRef: ref})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = eng.Release(context.Background(), sandbox.SandboxRef{ID: c.ID}) })
		return c.ID
	}
	lost := claim(string(id) + "/99")
	gone := claim(string(cocoonbox.NewBoxID()) + "/1")
	foreign := claim("another-control-plane/1")

	rec := &worker.Reconciler{Temporal: d.Temporal, Store: d.Store, Engine: eng, Logger: slog.New(slog.DiscardHandler)}
	if n, err := rec.Once(ctx); err != nil || n.Sandboxes != 0 {
		t.Fatalf("reconcile within the grace period: %+v, %v; want nothing released", n, err)
	}
	rec.Now = func() time.Time { return time.Now().Add(time.Hour) }
	if n, err := rec.Once(ctx); err != nil || n.Sandboxes != 2 {
		t.Fatalf("reconcile: %+v, %v; want the two orphans released", n, err)
	}
	rows, err := eng.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, r := range rows {
		left[r.ID] = true
	}
	for sid, want := range map[string]bool{own.ID: true, foreign: true, lost: false, gone: false} {
		if left[sid] != want {
			t.Errorf("sandbox %s still on the engine: %v, want %v", sid, left[sid], want)
		}
	}
	if out := mustExec(ctx, t, eng, own, "echo alive"); strings.TrimSpace(out) != "alive" {
		t.Errorf("the box after reconcile: %q", out)
	}
}

// TestReconcileBoxRows: a box row left in a transient state its workflow is not in is set from
// the workflow once past the grace period and not before: an idle workflow's state is written
// back; a box whose workflow was terminated is failed, naming why, or deleted when it was being
// deleted.
func TestReconcileBoxRows(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, eng := newBoxEnv(t, boxConfig(t), 3*time.Minute)
	create := func(name string, row cocoonbox.BoxState, terminate bool) cocoonbox.BoxID {
		id := cocoonbox.NewBoxID()
		if _, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: id, Name: name, Size: cocoonbox.SizeSmall}); err != nil {
			t.Fatal(err)
		}
		if terminate {
			if err := d.Temporal.TerminateWorkflow(ctx, workflows.BoxWorkflowID(id), "", "test: an operator ended it"); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Store.SetBoxState(ctx, id, row, "", ""); err != nil {
			t.Fatal(err)
		}
		return id
	}
	idle := create("idle", cocoonbox.BoxStateWaking, false)
	ended := create("ended", cocoonbox.BoxStateHibernating, true)
	deleting := create("deleting", cocoonbox.BoxStateDeleting, true)
	before, err := d.Store.BoxByID(ctx, idle)
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := d.Store.BoxByID(ctx, deleting)
	if err != nil {
		t.Fatal(err)
	}

	rec := &worker.Reconciler{Temporal: d.Temporal, Store: d.Store, Engine: eng, Logger: slog.New(slog.DiscardHandler)}
	if n, err := rec.Once(ctx); err != nil || n.Boxes != 0 {
		t.Fatalf("reconcile within the grace period: %+v, %v; want nothing settled", n, err)
	}
	rec.Now = func() time.Time { return time.Now().Add(time.Hour) }
	if n, err := rec.Once(ctx); err != nil || n.Boxes != 3 || n.Sandboxes != 1 {
		t.Fatalf("reconcile: %+v, %v; want the three rows settled and the deleted box's sandbox released", n, err)
	}
	if rows, err := eng.List(ctx, ""); err != nil || slices.ContainsFunc(rows, func(s sandbox.Sandbox) bool { return s.ID == deleted.SandboxID }) {
		t.Errorf("the deleted box's sandbox %s is still on the engine: %v", deleted.SandboxID, err)
	}
	want := map[cocoonbox.BoxID]struct {
		state  cocoonbox.BoxState
		reason string
	}{
		idle:     {cocoonbox.BoxStateRunning, ""},
		ended:    {cocoonbox.BoxStateFailed, "the box's workflow ended (terminated) while the box was hibernating"},
		deleting: {cocoonbox.BoxStateDeleted, ""},
	}
	for id, w := range want {
		b, err := d.Store.BoxByID(ctx, id)
		if err != nil || b.State != w.state || b.Reason != w.reason {
			t.Errorf("box %s: %s %q, %v; want %s %q", id, b.State, b.Reason, err, w.state, w.reason)
		}
	}
	if b, _ := d.Store.BoxByID(ctx, idle); b.SandboxID != before.SandboxID {
		t.Errorf("the idle box's sandbox changed from %s to %s", before.SandboxID, b.SandboxID)
	}
}
