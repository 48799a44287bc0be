package devstack_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
	"github.com/loomhand/cocoonbox/internal/worker"
)

// chaosReport, when set, is where TestChaos writes its matrix (make chaos: docs/reliability.md).
var chaosReport = flag.String("chaos-report", "", "write TestChaos's matrix to this markdown file")

// chaosFull adds the second kill point of every operation, after its engine call (make chaos);
// make test runs the first, as the activity starts.
var chaosFull = flag.Bool("chaos-full", false, "kill each part after each operation's engine call too")

// chaosCell is one kill: an operation on a box, the part SIGKILLed, and the point inside the
// operation where it dies (the moment an activity of the operation has started on the worker).
type chaosCell struct {
	op, part, point string
	activity        string // the activity whose start is the kill point
	snapshots       int    // complete snapshots of the chaos box the operation adds: exactly once
	run             func(ctx context.Context, c *chaosBox) error
	// check, when set, is what must hold after the operation besides the chaos box's checks (of
	// the spare box, for the create and delete cells).
	check func(ctx context.Context, t *testing.T, c *chaosBox)
	// held kills once the activity's work is done and before its result reaches Temporal
	// (holdInterceptor), instead of as it starts.
	held bool
	// midUpload kills once UploadSnapshot reports bytes sent and before the upload ends: the
	// box first gets midUploadBytes of fresh data, and the worker a cap of midUploadMiBps, so
	// the upload lasts seconds.
	midUpload bool
}

// chaosBox is the box a cell operates on, with a file whose hash must survive every kill.
type chaosBox struct {
	t      *testing.T // the suite's: a worker started again outlives the cell
	worker *childWorker
	wcfg   config.Worker
	hooks  childHooks
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
	within := 10 * time.Minute
	if *chaosFull {
		within = 25 * time.Minute // two kill points, mid-upload cells and the S3 outage's retry window
	}
	d, ctx, owner, eng := newBoxEnv(t, cfg, within)
	c := &chaosBox{t: t, d: d, owner: owner.ID, id: cocoonbox.NewBoxID(), eng: eng, wcfg: workerConfig(d),
		hooks: childHooks{HoldDir: t.TempDir()}}
	c.worker = startChildWorkerWith(t, c.wcfg, c.hooks)
	// Retention keeps every snapshot, so that each cell's count of them is exact.
	keep := boxsvc.MaxKeepSnapshots
	if _, err := d.Boxes.SetPolicyDefaults(ctx, owner.ID, boxsvc.PolicyChange{KeepSnapshots: &keep}); err != nil {
		t.Fatal(err)
	}
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
	restored := func(ctx context.Context, t *testing.T, c *chaosBox) {
		// The restore answers before the replaced sandbox's release ends (releaseReplaced).
		testutil.EventuallyReports(t, testutil.WaitShort, "the engine to hold 1 sandbox after the restore (the restored one; the replaced one released, none left by a retried try)", func() (bool, string) {
			sbs := c.sandboxes(ctx, t)
			return sbs == 1, fmt.Sprintf("%d sandboxes", sbs)
		})
	}
	// Groups of operations: a create and the delete of what it created go together.
	groups := [][]chaosCell{
		{{op: "snapshot", activity: "UploadSnapshot", snapshots: 1, run: snapshot}},
		// A hibernate seals the sleeping box: one snapshot, in the background.
		{{op: "hibernate+wake", activity: "HibernateRecorded", snapshots: 1, run: hibernateWake}},
		{{op: "wake", activity: "Wake", snapshots: 1, run: hibernateWake}}, // killed in the wake
		{{op: "restore", activity: "RestoreSnapshot", run: restore, check: restored}},
		{{op: "create", activity: "Claim", run: create, check: created},
			{op: "delete", activity: "Release", run: del, check: deleted}},
	}
	points := []bool{false} // as the activity starts
	if *chaosFull {
		points = append(points, true) // once its work is done, before Temporal records it
	}
	parts := []string{"postgres", "s3", "worker", "engine", "temporal"}
	// Each part's kills are spread over the run (parts inside operations), as a part killed now
	// and then from outside would be, not one crash loop.
	var cells []chaosCell
	for _, held := range points {
		for _, group := range groups {
			for _, part := range parts {
				for _, cell := range group {
					cell.part, cell.held, cell.point = part, held, cell.activity+" started"
					if held {
						cell.point = cell.activity + " done, not yet recorded"
					}
					cells = append(cells, cell)
				}
			}
		}
	}
	if *chaosFull {
		for _, part := range parts {
			cells = append(cells, chaosCell{op: "snapshot", part: part, point: "UploadSnapshot mid-upload",
				activity: "UploadSnapshot", snapshots: 1, run: snapshot, midUpload: true})
		}
	}
	for _, cell := range cells {
		if cell.op == "create" {
			c.spare = cocoonbox.NewBoxID()
		}
		name := cell.op + "/" + cell.part
		switch {
		case cell.held:
			name += "/after"
		case cell.midUpload:
			name += "/mid-upload"
		}
		held := t.Run(name, func(t *testing.T) { c.runCell(ctx, t, cell) })
		verdict := "held"
		if !held {
			verdict = "FAILED"
		}
		chaosRows = append(chaosRows, fmt.Sprintf("| %s | %s | %s | %s |", cell.op, cell.part, cell.point, verdict))
	}
	if *chaosFull {
		var took time.Duration
		held := t.Run("snapshot/s3-down-through-every-retry", func(t *testing.T) { took = c.s3Outage(ctx, t) })
		chaosRows = append(chaosRows, fmt.Sprintf("| snapshot | s3, down through every retry | the whole operation | %s |",
			outageVerdict(held, took)))
	}
	writeChaosReport(t)
}

// chaosRows are the matrix's rows so far: TestChaos's, then TestChaosAgentStep's.
var chaosRows []string

// writeChaosReport writes the matrix so far; the suite's last test writes it whole.
func writeChaosReport(t *testing.T) {
	matrix := "| operation | part killed | point | result |\n|---|---|---|---|\n" + strings.Join(chaosRows, "\n") + "\n"
	t.Logf("chaos matrix:\n%s", matrix)
	if *chaosReport != "" {
		if err := os.WriteFile(*chaosReport, []byte(chaosDoc+matrix+chaosBeside), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// TestChaosAgentStep kills each part while an agent run's second step has its shell command
// running in a desktop box. With any part of the stack killed the run must finish with every
// command run exactly once (an interrupted call is answered from the agent's journal). With the
// in-box agent itself killed, the step cannot be answered: the run must fail naming the
// interruption, nothing after it may run, no command twice, and a new run on the box must work.
func TestChaosAgentStep(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	a, models, w, wcfg := newAgentEnvWithChildWorker(t, 15*time.Minute)
	suite := t // a worker started again outlives the cell
	for _, part := range []string{"worker", "postgres", "s3", "temporal", "engine", "agent"} {
		held := t.Run(part, func(t *testing.T) {
			proof := "/home/user/proof-" + part
			running := "/tmp/step2-running-" + part
			turns := []modeltest.Turn{
				modeltest.Calls(modeltest.Call("shell", `{"command":"echo one >> `+proof+`"}`)),
				modeltest.Calls(modeltest.Call("shell", `{"command":"echo two >> `+proof+`; touch `+running+`; sleep 3; echo two-done >> `+proof+`"}`)),
			}
			if part != "agent" { // a killed agent's run ends at step 2
				turns = append(turns, modeltest.Calls(modeltest.Call("shell", `{"command":"echo three >> `+proof+`"}`)),
					modeltest.Reply("All three done."))
			}
			models.Script(turns...)
			run := a.start(t, "Write three lines.")
			if err := testutil.Poll(a.ctx, 2*time.Minute, func() error { _, err := a.run("test -e " + running); return err }); err != nil {
				t.Fatal(err)
			}
			switch part {
			case "worker":
				w.kill()
				w = startChildWorker(suite, wcfg)
			case "agent":
				a.mustRun(t, `for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = cocoonbox-agent ] && kill -9 ${p#/proc/}; done; true`)
			default:
				if err := syscall.Kill(devstack.ChildPid(a.d, part), syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			run = a.waitRun(t, run.GetId(), 3*time.Minute, string(cocoonbox.AgentRunSucceeded), string(cocoonbox.AgentRunFailed))
			if part != "agent" {
				if run.GetState() != string(cocoonbox.AgentRunSucceeded) || run.GetResult() != "All three done." {
					t.Fatalf("run with %s killed in step 2: %s %q", part, run.GetState(), run.GetError())
				}
				if got := a.mustRun(t, "cat "+proof); got != "one\ntwo\ntwo-done\nthree\n" {
					t.Fatalf("the steps' commands ran %q, want each once", got)
				}
				return
			}
			if run.GetState() != string(cocoonbox.AgentRunFailed) || !strings.Contains(run.GetError(), "the box's agent restarted while the step ran") {
				t.Fatalf("run with the agent killed in step 2: %s %q; want failed naming the interruption", run.GetState(), run.GetError())
			}
			if got := a.mustRun(t, "cat "+proof); got != "one\ntwo\n" && got != "one\ntwo\ntwo-done\n" {
				t.Fatalf("the steps' commands ran %q, want step 1's and step 2's once and nothing after", got)
			}
			// Retryable: the restarted agent takes a new run.
			models.Script(modeltest.Calls(modeltest.Call("shell", `{"command":"echo again >> `+proof+`"}`)), modeltest.Reply("Done again."))
			again := a.waitRun(t, a.start(t, "Once more.").GetId(), 3*time.Minute, string(cocoonbox.AgentRunSucceeded), string(cocoonbox.AgentRunFailed))
			if again.GetState() != string(cocoonbox.AgentRunSucceeded) {
				t.Fatalf("a new run after the agent's restart: %s %q", again.GetState(), again.GetError())
			}
		})
		verdict := "held"
		if !held {
			verdict = "FAILED"
		}
		chaosRows = append(chaosRows, fmt.Sprintf("| agent step | %s | step 2's command running | %s |", part, verdict))
	}
	writeChaosReport(t)
}

// chaosBeside follows the matrix: what other tests of the suite prove.
const chaosBeside = `
Beside the matrix, ` + "`TestSnapshotWithDiskFull`" + ` fills the engine's checkpoint disk (a 64 MiB
loop-mounted ext4 under its data dir): the snapshot answers ` + "`unavailable`" + ` naming the full disk
within its 20 s deadline, ` + "`box show`" + ` says what it waits for, the box keeps running with
its file intact, no partial checkpoint is left, and once space is freed the retried snapshot
completes exactly once. A clock jump is the engine's ` + "`TestClockJumpKeepsBoxes`" + ` (its injected
clock, since the host's is shared): three hours ahead, past every lease, while the engine is
down, reaps no box at once; a box its owner renews keeps its files, one nobody renews is reaped
after a 10-minute grace.
`

const chaosDoc = `# Reliability

What ` + "`make chaos`" + ` (TestChaos in internal/devstack/chaos_test.go) proved on the last run: each
operation on a real box of a running dev stack, with the named part SIGKILLed at two points: as
the operation's activity started on the worker (during the engine call), and once the
activity's work was done but before its result reached Temporal (the worker holds it there
for 3 s; a worker killed then leaves an activity that runs again and must not do its work
twice). Snapshots have a third point, mid-upload: the box gets 48 MiB of fresh random data and
the worker a 4 MiB/s upload cap, and the part dies while the snapshot's multipart upload is open
in the bucket, parts sent and more to come. ` + "`make test`" + ` runs the first point of every cell. "held" means the operation completed exactly once
(a snapshot adds one complete snapshot, a hibernate one seal, a restore none) after the supervisor restarted
the part, the box's 16 MiB file kept its sha256, no snapshot row was left uploading and no
multipart upload was left behind, and a reconciler pass an hour on found nothing to settle (no
orphaned sandbox, no box row left transient, no upload without a workflow). The worker runs as a process of its own (as serve worker
does) and is started again after its kill; PostgreSQL, the S3 server, the engine and Temporal are
the dev stack's supervised children. The agent step rows (TestChaosAgentStep) kill each part
while a run's second step has its shell command running in a desktop box: "held" means the run
finished with every command run exactly once; for the in-box agent itself, which the box's boot
script starts again, that the run failed naming the interruption, no command ran twice or after
it, and a new run on the box succeeded. The API rows (TestChaosAPI) run the real CLI against
` + "`cocoonbox serve api`" + ` in a process of its own, SIGKILLed when the command's activity started
and started again on the same address: "held" means the command succeeded on its resends (one
request ID) and did its work once (one snapshot, one box and one sandbox for a create, the box
gone and its sandbox released for an rm).
A create must leave exactly one new sandbox on the engine and a delete none.

`

// runCell runs cell.run and kills cell.part once cell.activity has started, then checks that
// the operation completed and the box is whole.
func (c *chaosBox) runCell(ctx context.Context, t *testing.T, cell chaosCell) {
	before := c.complete(ctx, t)
	held := filepath.Join(c.hooks.HoldDir, "held-"+cell.activity)
	if cell.held {
		arm := filepath.Join(c.hooks.HoldDir, "arm-"+cell.activity)
		_ = os.Remove(held)
		if err := os.WriteFile(arm, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = os.Remove(arm) }() // unsprung (the cell failed first): not for the next cell
	}
	started := startedFile(c.hooks.HoldDir, cell.activity)
	_ = os.Remove(started) // an earlier cell's
	c.capUploads(t, cell.midUpload)
	if cell.midUpload {
		// Fresh data each time, replacing the last cell's, so the snapshot has it to upload.
		if _, err := c.exec(ctx, fmt.Sprintf("head -c %d /dev/urandom > /root/scratch", midUploadBytes)); err != nil {
			t.Fatal(err)
		}
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
		var now bool
		switch {
		case cell.held:
			now = exists(held)
		case cell.midUpload:
			now = c.uploading(ctx)
		default:
			now = exists(started)
		}
		if now {
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
	// The checks below read every part: the killed one must be back first (an operation that
	// does not need it, such as a delete without S3, ends before its supervisor restarts it).
	if cell.part != "worker" {
		testutil.Eventually(t, testutil.WaitShort, cell.part+" running again", func() bool {
			return c.d.Children()[cell.part].State == "running"
		})
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
}

// kill SIGKILLs part: a managed child, which its supervisor starts again, or the worker, which
// is started again here as an operator's service manager would (its activities are retried on
// the new one after their heartbeat timeout).
func (c *chaosBox) kill(t *testing.T, part string) {
	if part == "worker" {
		c.worker.kill()
		c.worker = startChildWorkerWith(c.t, c.wcfg, c.hooks)
		return
	}
	if err := syscall.Kill(devstack.ChildPid(c.d, part), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
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
