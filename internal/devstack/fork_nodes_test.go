package devstack_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// sleeperRunning says whether the process whose PID /root/sleeper holds is the sleep started
// there.
const sleeperRunning = `tr '\0' ' ' < /proc/$(cat /root/sleeper)/cmdline 2>/dev/null | grep -q '^sleep 1000' && echo running || echo gone`

// TestForkToAnotherNode: a box runs on a node that has room for no other (max_sandboxes 1). Its
// fork goes to the other node with the box's disk through a snapshot (a file written before the
// fork is there), not its memory (a process started before it is not), with a machine ID and a
// hostname of its own, and its events say so; the box's checkpoint is dropped once the fork's
// snapshot is stored, and the box itself runs on untouched.
func TestForkToAnotherNode(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.EngineMaxSandboxes = 1
	cfg.NodeDeadAfter = time.Minute
	d, ctx, owner, eng := newBoxEnv(t, cfg, 6*time.Minute)
	id, ref := createBox(ctx, t, d, owner.ID, eng) // on the stack's own node, which is then full
	sum := mustExec(ctx, t, eng, ref, "head -c 1M /dev/urandom > /root/kept && sha256sum /root/kept")
	mustExec(ctx, t, eng, ref, "setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > /root/sleeper")
	sourceID := mustExec(ctx, t, eng, ref, "cat /etc/machine-id 2>/dev/null || true") // the base image has none
	other := startNode(ctx, t, cfg, d, "node-b")

	forked, err := d.Boxes.Fork(ctx, owner.ID, id, boxsvc.ForkRequest{Count: 1})
	if err != nil || len(forked.Boxes) != 1 {
		t.Fatalf("fork: %+v, %v", forked, err)
	}
	f := forked.Boxes[0]
	if f.State != cocoonbox.BoxStateRunning {
		t.Fatalf("the fork: %s (%s); want running", f.State, f.LastError)
	}
	if _, err := other.client.Get(ctx, f.SandboxID); err != nil {
		t.Fatalf("the fork's sandbox %s on node-b: %v", f.SandboxID, err)
	}
	run := func(box cocoonbox.BoxID, script string) string {
		t.Helper()
		got, err := d.Boxes.Exec(ctx, owner.ID, box, boxsvc.ExecRequest{Argv: []string{"sh", "-c", script}})
		if err != nil || got.ExitCode != 0 {
			t.Fatalf("%s in %s: %+v, %v", script, box, got, err)
		}
		return got.Stdout
	}
	if got := run(f.BoxID, "sha256sum /root/kept"); got != sum {
		t.Fatalf("the file in the fork: %q, want %q", got, sum)
	}
	// By its command line, not its PID alone: the fork boots afresh, and its own processes
	// (the shell running this, say) may take the PID the sleeper had.
	if got := run(f.BoxID, sleeperRunning); got != "gone\n" {
		t.Fatalf("the process started before the fork, in the fork: %q; want gone (the memory stays behind)", got)
	}
	if got := run(f.BoxID, "cat /etc/machine-id; hostname"); len(got) < 33 || got[:33] == sourceID || !strings.HasSuffix(got, "\nsnap-fork-1\n") {
		t.Fatalf("the fork's machine ID and hostname: %q; the source's machine ID is %q", got, sourceID)
	}
	events, err := d.Store.EventsForBox(ctx, string(f.BoxID), 100)
	if err != nil || !slices.ContainsFunc(events, func(ev store.Event) bool {
		var d struct{ Detail string }
		_ = json.Unmarshal(ev.Detail, &d)
		return ev.Action == "box.forked_without_memory" && strings.Contains(d.Detail, "on node node-b")
	}) {
		t.Fatalf("the fork's events do not say it has no memory: %v", err)
	}
	testutil.Eventually(t, testutil.WaitLong, "the box's fork checkpoint dropped", func() bool {
		cks, err := eng.ListCheckpoints(ctx)
		return err == nil && len(cks) == 0
	})
	if got := run(id, "sha256sum /root/kept; "+sleeperRunning); got != sum+"running\n" {
		t.Fatalf("the source after its fork: %q", got)
	}
}
