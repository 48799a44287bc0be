package devstack_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
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
	hooks := childHooks{HoldDir: t.TempDir()}
	first := startChildWorkerWith(t, wcfg, hooks)

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
	// Kill the worker the moment the Wake activity starts on it.
	wakeStarted := startedFile(hooks.HoldDir, "Wake")
	started := false
	for !started {
		select {
		case r := <-woke:
			t.Fatalf("wake finished before the worker could be killed: %+v, %v", r.st, r.err)
		case <-ctx.Done():
			t.Fatal("the Wake activity never started")
		case <-time.After(10 * time.Millisecond):
		}
		started = exists(wakeStarted)
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

// newAgentEnvWithChildWorker is a desktop box with a scripted model whose worker is a process of
// its own, as serve worker is, to be killed; wcfg starts another.
func newAgentEnvWithChildWorker(t *testing.T, timeout time.Duration) (a *agentEnv, models *modeltest.Server, w *childWorker, wcfg config.Worker) {
	t.Helper()
	models = modeltest.NewServer(t, gatewayKey)
	cfg := agentConfig(t, models)
	cfg.NoWorker = true
	e := newDesktopEnvWith(t, cfg, timeout, func(d *devstack.Dev) {
		wcfg = workerConfig(d)
		wcfg.Template = "desktop"
		wcfg.Agent = cfg.Agent // the worker's own gateway: runs carry none
		w = startChildWorker(t, wcfg)
	})
	return newAgentEnv(t, cfg, models, e), models, w, wcfg
}

// TestAgentRunSurvivesHibernateAndKilledWorker kills the worker while a step's command runs in
// the box, hibernates the box between steps with a new worker, and checks the run resumes after
// the wake and finishes, with every step executed in the box exactly once: the interrupted step's
// retry is answered from the agent's journal.
func TestAgentRunSurvivesHibernateAndKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	a, models, first, wcfg := newAgentEnvWithChildWorker(t, 10*time.Minute)

	models.Script(
		modeltest.Calls(modeltest.Call("shell", `{"command":"echo one >> /home/user/proof"}`)),
		modeltest.Calls(modeltest.Call("shell", `{"command":"echo two >> /home/user/proof; touch /tmp/step2-running; sleep 4; echo two-done >> /home/user/proof"}`)),
		modeltest.Calls(modeltest.Call("shell", `{"command":"echo three >> /home/user/proof"}`)),
		modeltest.Reply("All three done."))
	run := a.start(t, "Write three lines.")
	if err := testutil.Poll(a.ctx, 2*time.Minute, func() error { _, err := a.run("test -e /tmp/step2-running"); return err }); err != nil {
		t.Fatal(err)
	}
	first.kill()
	t.Log("killed the worker while step 2's command ran in the box")
	// The step goes on in the box without its caller and lands in the agent's journal. (Straight
	// to the engine: with no worker, the box workflow answers no queries.)
	if err := testutil.Poll(a.ctx, time.Minute, func() error {
		res, err := a.eng.Exec(a.ctx, a.ref, sandbox.ExecRequest{Argv: []string{"sh", "-c",
			"grep -q two-done /home/user/proof && ls /var/lib/cocoonbox-agent/journal/*/2.pb"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	startChildWorker(t, wcfg)
	if v, err := a.d.Boxes.Hibernate(a.ctx, a.owner.ID, a.id); err != nil || v.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("hibernate between steps: %+v, %v", v.State, err)
	}
	t.Log("hibernated the box between steps with a new worker")

	run = a.waitRun(t, run.GetId(), 3*time.Minute, string(cocoonbox.AgentRunSucceeded), string(cocoonbox.AgentRunFailed))
	if run.GetState() != string(cocoonbox.AgentRunSucceeded) || run.GetResult() != "All three done." {
		t.Fatalf("run after the kill and the hibernate: %s %q", run.GetState(), run.GetError())
	}
	if got := a.mustRun(t, "cat /home/user/proof"); got != "one\ntwo\ntwo-done\nthree\n" {
		t.Fatalf("the steps' commands ran %q, want each once", got)
	}
	if !run.GetSteps()[1].GetReplayed() {
		t.Fatalf("step 2 was not answered from the journal: %v", run.GetSteps()[1])
	}
	if n := len(models.Requests()); n != 4 {
		t.Fatalf("the model was asked %d times for 4 turns", n)
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
