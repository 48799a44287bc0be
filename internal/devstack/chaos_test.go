package devstack_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
	"github.com/loomhand/cocoonbox/internal/worker"
	"github.com/loomhand/cocoonbox/workflows"
)

// chaosReport, when set, is where TestChaos writes its matrix (make chaos: docs/reliability.md).
var chaosReport = flag.String("chaos-report", "", "write TestChaos's matrix to this markdown file")

// chaosCell is one kill: an operation on a box, the part SIGKILLed, and the point inside the
// operation where it dies (the moment an activity of the operation has started on the worker).
type chaosCell struct {
	op, part, point string
	activity        string // the activity whose start is the kill point
	snapshots       int    // complete snapshots of the chaos box the operation adds: exactly once
	run             func(ctx context.Context, c *chaosBox) error
	// other, when set, is the box the operation is on instead of the chaos box, and check what
	// must hold of it after; the chaos box's checks still run.
	other func(c *chaosBox) cocoonbox.BoxID
	check func(ctx context.Context, t *testing.T, c *chaosBox)
}

// chaosBox is the box a cell operates on, with a file whose hash must survive every kill.
type chaosBox struct {
	t      *testing.T // the suite's: a worker started again outlives the cell
	worker *childWorker
	wcfg   config.Worker
	d      *devstack.Dev
	owner  string
	id     cocoonbox.BoxID
	eng    *sandbox.HTTP
	sum    string
	// spare is the box the create cells make and the delete cells remove.
	spare cocoonbox.BoxID
}

// TestChaos is the short chaos suite: for each cell a managed part of a running stack is
// SIGKILLed at the moment the operation's activity starts, the supervisor brings it back, and
// the operation must complete exactly once, with the box's 16 MiB file intact (sha256), no
// snapshot row left uploading and no multipart upload left behind. It prints the matrix
// (operation × part × point → held or why not).
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.NoWorker = true // the worker runs as a process of its own, as serve worker does, to be killed
	d, ctx, owner, eng := newBoxEnv(t, cfg, 10*time.Minute)
	c := &chaosBox{t: t, d: d, owner: owner.ID, id: cocoonbox.NewBoxID(), eng: eng, wcfg: workerConfig(d)}
	c.worker = startChildWorker(t, c.wcfg)
	if st, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: c.id, Name: "chaos", Size: cocoonbox.SizeSmall}); err != nil || st.State != cocoonbox.BoxStateRunning {
		t.Fatalf("create: %+v, %v", st, err)
	}
	out, err := c.exec(ctx, "head -c 16777216 /dev/urandom > /root/data && sha256sum /root/data")
	if err != nil {
		t.Fatal(err)
	}
	c.sum = strings.Fields(out)[0]

	snapshot := func(ctx context.Context, c *chaosBox) error {
		_, err := c.d.Boxes.Snapshot(ctx, c.owner, c.id)
		return err
	}
	hibernateWake := func(ctx context.Context, c *chaosBox) error {
		if _, err := c.d.Boxes.Hibernate(ctx, c.owner, c.id); err != nil {
			return fmt.Errorf("hibernate: %w", err)
		}
		_, err := c.d.Boxes.Wake(ctx, c.owner, c.id)
		return err
	}
	restore := func(ctx context.Context, c *chaosBox) error {
		_, err := c.d.Boxes.Restore(ctx, c.owner, c.id, "")
		return err
	}
	create := func(ctx context.Context, c *chaosBox) error {
		_, err := c.d.Boxes.Create(ctx, c.owner, boxsvc.CreateRequest{ID: c.spare, Name: "spare-" + string(c.spare[3:9]), Size: cocoonbox.SizeSmall})
		return err
	}
	created := func(ctx context.Context, t *testing.T, c *chaosBox) {
		st, err := c.d.Boxes.Get(ctx, c.owner, c.spare)
		if err != nil || st.State != cocoonbox.BoxStateRunning {
			t.Fatalf("created box: %+v, %v", st, err)
		}
		if sbs := c.sandboxes(ctx, t); sbs != 2 {
			t.Errorf("engine holds %d sandboxes, want 2 (the chaos box and the one created)", sbs)
		}
	}
	del := func(ctx context.Context, c *chaosBox) error {
		_, err := c.d.Boxes.Delete(ctx, c.owner, c.spare)
		return err
	}
	deleted := func(ctx context.Context, t *testing.T, c *chaosBox) {
		if st, err := c.d.Boxes.Get(ctx, c.owner, c.spare); err == nil && st.State != cocoonbox.BoxStateDeleted {
			t.Fatalf("deleted box: %+v", st)
		}
		if sbs := c.sandboxes(ctx, t); sbs != 1 {
			t.Errorf("engine holds %d sandboxes, want 1 (the chaos box)", sbs)
		}
	}
	spare := func(c *chaosBox) cocoonbox.BoxID { return c.spare }
	var cells []chaosCell
	for _, part := range []string{"postgres", "s3", "worker", "engine", "temporal"} {
		cells = append(cells,
			chaosCell{"snapshot", part, "UploadSnapshot started", "UploadSnapshot", 1, snapshot, nil, nil},
			// A hibernate seals the sleeping box: one snapshot, in the background.
			chaosCell{"hibernate+wake", part, "Hibernate started", "Hibernate", 1, hibernateWake, nil, nil},
			chaosCell{"restore", part, "RestoreSnapshot started", "RestoreSnapshot", 0, restore, nil, nil},
			chaosCell{"create", part, "Claim started", "Claim", 0, create, spare, created},
			chaosCell{"delete", part, "Release started", "Release", 0, del, spare, deleted})
	}
	var rows []string
	for _, cell := range cells {
		if cell.op == "create" {
			c.spare = cocoonbox.NewBoxID()
		}
		name := cell.op + "/" + cell.part
		held := t.Run(name, func(t *testing.T) { c.runCell(ctx, t, cell) })
		verdict := "held"
		if !held {
			verdict = "FAILED"
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s |", cell.op, cell.part, cell.point, verdict))
	}
	matrix := "| operation | part killed | point | result |\n|---|---|---|---|\n" + strings.Join(rows, "\n") + "\n"
	t.Logf("chaos matrix:\n%s", matrix)
	if *chaosReport != "" {
		if err := os.WriteFile(*chaosReport, []byte(chaosDoc+matrix+chaosBeside), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// chaosBeside follows the matrix: what other tests of the suite prove.
const chaosBeside = `
Beside the matrix, ` + "`TestSnapshotWithDiskFull`" + ` fills the engine's checkpoint disk (a 64 MiB
loop-mounted ext4 under its data dir): the snapshot answers ` + "`unavailable`" + ` naming the full disk
within its 20 s deadline, ` + "`box show`" + ` says what it waits for, the box keeps running with
its file intact, no partial checkpoint is left, and once space is freed the retried snapshot
completes exactly once.
`

const chaosDoc = `# Reliability

What ` + "`make chaos`" + ` (TestChaos in internal/devstack/chaos_test.go) proved on the last run: each
operation on a real box of a running dev stack, with the named part SIGKILLed when the
operation's activity started on the worker. "held" means the operation completed exactly once
(a snapshot adds one complete snapshot, a hibernate one seal, a restore none) after the supervisor restarted
the part, the box's 16 MiB file kept its sha256, no snapshot row was left uploading and no
multipart upload was left behind, and a reconciler pass an hour on found nothing to settle (no
orphaned sandbox, no box row left transient, no upload without a workflow). The worker runs as a process of its own (as serve worker
does) and is started again after its kill; PostgreSQL, the S3 server, the engine and Temporal are
the dev stack's supervised children. An agent step is not in this matrix yet (a worker killed
mid agent step: TestAgentRunSurvivesHibernateAndKilledWorker), nor is the API.
A create must leave exactly one new sandbox on the engine and a delete none.

`

// runCell runs cell.run and kills cell.part once cell.activity has started, then checks that
// the operation completed and the box is whole.
func (c *chaosBox) runCell(ctx context.Context, t *testing.T, cell chaosCell) {
	before := c.complete(ctx, t)
	target := c.id
	if cell.other != nil {
		target = cell.other(c)
	}
	done := make(chan error, 1)
	go func() { done <- cell.run(ctx, c) }()
	killed := false
	for !killed {
		select {
		case err := <-done:
			t.Fatalf("%s finished before the kill point: %v", cell.op, err)
		case <-ctx.Done():
			t.Fatal("the kill point never came")
		case <-time.After(20 * time.Millisecond):
		}
		if activityStarted(ctx, c.d.Temporal, target, cell.activity) {
			c.kill(t, cell.part)
			killed = true
		}
	}
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the operation did not end after the kill")
	}
	if err != nil {
		t.Fatalf("%s with %s killed %s: %v", cell.op, cell.part, cell.point, err)
	}
	if cell.check != nil {
		cell.check(ctx, t, c)
	}
	st, err := c.d.Boxes.Get(ctx, c.owner, c.id)
	if err != nil || st.State != cocoonbox.BoxStateRunning {
		t.Fatalf("box after: %+v, %v", st, err)
	}
	out, err := c.exec(ctx, "sha256sum /root/data")
	if err != nil || !strings.HasPrefix(out, c.sum) {
		t.Fatalf("file after: %q, %v; want sha256 %s", out, err, c.sum)
	}
	var seen string
	testutil.Eventually(t, testutil.WaitLong, fmt.Sprintf("%d more complete snapshots", cell.snapshots), func() bool {
		got := c.complete(ctx, t)
		seen = fmt.Sprintf("%d → %d", before, got)
		return got >= before+cell.snapshots
	}, &seen)
	if got := c.complete(ctx, t); got != before+cell.snapshots {
		t.Errorf("complete snapshots %d → %d, want exactly %d more", before, got, cell.snapshots)
	}
	// Once the snapshots the operation adds are complete (a hibernate's seal runs on after the
	// wake), none is left uploading.
	snaps, err := c.d.Store.ListSnapshots(ctx, c.id)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		if s.State == cocoonbox.SnapshotUploading {
			t.Errorf("snapshot %s left uploading", s.ID)
		}
	}
	if left, err := c.d.Blobs.ListIncomplete(ctx, "boxes/"); err != nil || len(left) != 0 {
		t.Errorf("multipart uploads left: %v, %v", left, err)
	}
	// Nothing for the reconciler to settle, even an hour on: no orphaned sandbox, no row left
	// transient, no upload without a workflow.
	rec := &worker.Reconciler{Temporal: c.d.Temporal, Store: c.d.Store, Engine: c.eng,
		Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.Now().Add(time.Hour) }}
	if n, err := rec.Once(ctx); err != nil || n != (worker.Settled{}) {
		t.Errorf("left for the reconciler: %+v, %v", n, err)
	}
	if cell.part != "worker" {
		testutil.Eventually(t, testutil.WaitShort, cell.part+" running again", func() bool {
			return c.d.Children()[cell.part].State == "running"
		})
	}
}

// kill SIGKILLs part: a managed child, which its supervisor starts again, or the worker, which
// is started again here as an operator's service manager would (its activities are retried on
// the new one after their heartbeat timeout).
func (c *chaosBox) kill(t *testing.T, part string) {
	if part == "worker" {
		c.worker.kill()
		c.worker = startChildWorker(c.t, c.wcfg)
		return
	}
	if err := syscall.Kill(devstack.ChildPid(c.d, part), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// sandboxes counts the engine's sandboxes: none orphaned, none missing.
func (c *chaosBox) sandboxes(ctx context.Context, t *testing.T) int {
	t.Helper()
	rows, err := c.eng.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

// complete counts the box's complete snapshots.
func (c *chaosBox) complete(ctx context.Context, t *testing.T) int {
	t.Helper()
	snaps, err := c.d.Store.ListSnapshots(ctx, c.id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range snaps {
		if s.State == cocoonbox.SnapshotComplete {
			n++
		}
	}
	return n
}

// activityStarted reports whether an activity named name has started for the box: on its
// workflow or on a child of it (a snapshot's).
func activityStarted(ctx context.Context, tc client.Client, box cocoonbox.BoxID, name string) bool {
	for _, pa := range workflows.PendingActivities(ctx, tc, box) {
		if pa.GetActivityType().GetName() == name && pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED {
			return true
		}
	}
	return false
}

// exec runs a shell command in the box's current sandbox and returns its stdout.
func (c *chaosBox) exec(ctx context.Context, script string) (string, error) {
	st, err := c.d.Boxes.Get(ctx, c.owner, c.id)
	if err != nil {
		return "", err
	}
	row, err := c.eng.Get(ctx, st.SandboxID)
	if err != nil {
		return "", err
	}
	res, err := c.eng.Exec(ctx, sandbox.SandboxRef{ID: st.SandboxID, Token: row.Token}, sandbox.ExecRequest{Argv: []string{"sh", "-c", script}})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	return res.Stdout, nil
}
