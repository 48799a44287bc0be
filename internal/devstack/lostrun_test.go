package devstack_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// TestLostNodeRunFinishes: an agent run pins a desktop box on a second node, and the node (its
// engine and its worker) is SIGKILLed while the run's step waits on a tool call in the box. The
// step is tried again: once the heartbeats mark the node lost, the box comes back on the
// remaining node from its snapshot, the agent there takes the step afresh (its journal, restored
// from before the run, holds none of it) and the run finishes.
func TestLostNodeRunFinishes(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	models := modeltest.NewServer(t, gatewayKey)
	cfg := agentConfig(t, models)
	cfg.NodeDeadAfter = 25 * time.Second // beats come every 10 s
	d, ctx, owner, eng := newBoxEnv(t, cfg, 10*time.Minute)
	other := startNode(ctx, t, cfg, d, "node-b")

	id, st := createOffLocal(ctx, t, d, owner.ID, "run-on-b")
	if _, err := other.client.Get(ctx, st.SandboxID); err != nil {
		t.Fatalf("the box is not on node-b: %v", err)
	}
	if _, err := d.Boxes.Snapshot(ctx, owner.ID, id); err != nil {
		t.Fatal(err)
	}

	e, token := devAPI(t, d)
	auth := e.as(ctx, token)
	if _, err := cbv1.NewVaultServiceClient(e.conn).SetSecret(auth, &cbv1.SetSecretRequest{Name: gatewaySecret, Value: gatewayKey}); err != nil {
		t.Fatal(err)
	}
	agents := cbv1.NewAgentServiceClient(e.conn)
	models.Script(
		modeltest.Calls(modeltest.Call("shell", `{"command":"sleep 600"}`)),
		modeltest.Reply("Done, on the box that came back."))
	run, err := agents.StartRun(auth, &cbv1.StartRunRequest{Box: string(id), Task: "Wait a while."})
	if err != nil {
		t.Fatal(err)
	}
	var seen string
	ref := sandboxRef(ctx, t, other.client, st.SandboxID)
	testutil.Eventually(t, 2*time.Minute, "the step's tool call runs in the box on node-b", func() bool {
		// The desktop's own scripts start sleeps too: this one is the tool call's.
		res, err := other.client.Exec(ctx, ref, sandbox.ExecRequest{Argv: []string{"pgrep", "-f", "sleep 600"}})
		seen = fmt.Sprintf("%d model calls; pgrep: %+v, %v", len(models.Requests()), res, err)
		return err == nil && res.ExitCode == 0 && len(models.Requests()) == 1
	}, &seen)

	other.kill()
	var got *cbv1.AgentRun
	testutil.Eventually(t, 5*time.Minute, "the run finishes on the box brought back", func() bool {
		got, err = agents.GetRun(auth, &cbv1.GetRunRequest{RunId: run.GetId()})
		seen = fmt.Sprintf("%s %q %v", got.GetState(), got.GetError(), err)
		return err == nil && slices.Contains([]string{"succeeded", "failed", "cancelled"}, got.GetState())
	}, &seen)
	if got.GetState() != "succeeded" || got.GetResult() != "Done, on the box that came back." {
		t.Fatalf("the run after the node loss: %s %q %q", got.GetState(), got.GetError(), got.GetResult())
	}
	if n := len(models.Requests()); n != 2 || got.GetStepsDone() != 1 {
		t.Fatalf("%d model calls and %d steps done (%v); want 2 calls (the step taken again on the box brought back) and 1 step", n, got.GetStepsDone(), got.GetSteps())
	}
	v, err := d.Boxes.Get(ctx, owner.ID, id)
	if err != nil || v.State != cocoonbox.BoxStateRunning || v.RestoredFrom.SnapshotID == "" {
		t.Fatalf("the box after the run: %+v, %v", v.Status, err)
	}
	if _, err := eng.Get(ctx, v.SandboxID); err != nil {
		t.Fatalf("the box came back on sandbox %s, not on the remaining node: %v", v.SandboxID, err)
	}
}
