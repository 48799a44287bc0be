package devstack_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/netlab"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
	"github.com/loomhand/cocoonbox/workflows"
)

// TestMultiHost runs a deployment over four "hosts" built from network namespaces on a bridge of
// the test's own: the control host (this process's namespace: Temporal, PostgreSQL, S3 and two
// API replicas) and three engine nodes, each a gVisor engine with its own worker in a namespace of
// its own, reaching the control host and each other only at their bridge addresses. Twelve
// desktop boxes created through both replicas spread over the nodes by the placement rule;
// draining one node moves its boxes to the others with every file; SIGKILLing another node and
// removing its namespace loses its boxes' sandboxes while an agent run pins one of them: the run
// finishes on that box brought back, and each other box comes back on the remaining node from its
// snapshot on its next wake, restored by that node's own worker.
func TestMultiHost(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	hosts := netlab.NewHosts(t, 3)
	// The scripted model gateway serves loopback; the nodes' workers, which relay the agents'
	// model calls, reach it at the control host's address.
	models := modeltest.NewServer(t, gatewayKey)
	cfg := boxConfig(t)
	useGateway(&cfg, models)
	cfg.Agent.BaseURL = "http://" + relayTCP(t, hosts.Control, strings.TrimPrefix(models.URL, "http://")) + "/v1"
	cfg.Listen, cfg.TemporalListen = hosts.Control+":0", hosts.Control+":0"
	cfg.NoWorker = true // the nodes' workers serve; the control host runs none
	cfg.CreateWait = time.Minute
	cfg.Quota.Boxes = 12
	cfg.NodeDeadAfter = 25 * time.Second
	d, ctx, owner, _ := newBoxEnv(t, cfg, 20*time.Minute)
	// The embedded S3 server serves loopback only; the nodes reach it at the control host's
	// address through a relay, as they would reach an S3 service on the deployment's network.
	s3 := d.S3()
	s3.Endpoint = "http://" + relayTCP(t, hosts.Control, strings.TrimPrefix(s3.Endpoint, "http://"))

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"node-1", "node-2", "node-3"}
	var ns []*engineNode
	for i, id := range ids {
		wcfg := workerConfig(d)
		wcfg.Node, wcfg.NodeDeadAfter, wcfg.S3 = id, cfg.NodeDeadAfter, s3
		wcfg.Template, wcfg.Agent = cfg.Template, cfg.Agent
		n := startEngineNodeCmd(t, hosts.Command(i, self, engineNodeArg),
			engineNodeConfig{ImageCache: cfg.ImageCache, Listen: hosts.Addrs[i] + ":0"}, wcfg)
		if !strings.HasPrefix(n.url, "http://"+hosts.Addrs[i]+":") {
			t.Fatalf("node %s's engine is at %s, not on its host %s", id, n.url, hosts.Addrs[i])
		}
		ns = append(ns, n)
	}
	testutil.Eventually(t, testutil.WaitShort, "three nodes registered", func() bool {
		all, err := d.Store.ListNodes(ctx)
		return err == nil && len(all) == 3
	})

	e, admin := devAPI(t, d)
	if _, err := cbv1.NewVaultServiceClient(e.conn).SetSecret(e.as(ctx, admin), &cbv1.SetSecretRequest{Name: gatewaySecret, Value: gatewayKey}); err != nil {
		t.Fatal(err)
	}
	replica := dialReplica(t, devstack.StartAPIReplica(t, d))
	apis := []cbv1.BoxServiceClient{e.box, replica}
	var boxes []cocoonbox.BoxID
	sums := map[cocoonbox.BoxID]string{}
	for i := range 12 {
		resp, err := apis[i%2].CreateBox(e.as(ctx, admin), &cbv1.CreateBoxRequest{Name: fmt.Sprintf("spread-%d", i), Size: string(cocoonbox.SizeSmall)})
		if err != nil {
			t.Fatalf("create %d through replica %d: %v", i, i%2, err)
		}
		id := cocoonbox.BoxID(resp.GetId())
		boxes = append(boxes, id)
		out, err := d.Boxes.Exec(ctx, owner.ID, id, boxsvc.ExecRequest{Argv: []string{"sh", "-c", "head -c 1M /dev/urandom > /home/user/kept && sha256sum /home/user/kept"}})
		if err != nil || out.ExitCode != 0 {
			t.Fatalf("write in box %s: %+v, %v", id, out, err)
		}
		sums[id] = out.Stdout
	}
	on := boxesOn(ctx, t, d, ids)
	for _, id := range ids {
		if len(on[id]) != 4 {
			t.Fatalf("boxes per node %v: want 4 on each, by free memory", counts(on))
		}
	}
	intact := func(id cocoonbox.BoxID) {
		t.Helper()
		out, err := d.Boxes.Exec(ctx, owner.ID, id, boxsvc.ExecRequest{Argv: []string{"sha256sum", "/home/user/kept"}})
		if err != nil || out.Stdout != sums[id] {
			t.Fatalf("box %s's file: %q, %v; want %q", id, out.Stdout, err, sums[id])
		}
	}

	// Drain node-1: its four boxes run on the other two, with their files.
	drained, err := replica.DrainNode(e.as(ctx, admin), &cbv1.DrainNodeRequest{Node: "node-1", Wait: true})
	if err != nil || len(drained.GetDrain().GetMoved()) != 4 {
		t.Fatalf("drain node-1: %v, %v", drained.GetDrain(), err)
	}
	on = boxesOn(ctx, t, d, ids)
	if len(on["node-1"]) != 0 || len(on["node-2"])+len(on["node-3"]) != 12 {
		t.Fatalf("boxes per node after the drain: %v", counts(on))
	}
	for _, id := range drained.GetDrain().GetMoved() {
		intact(cocoonbox.BoxID(id))
	}

	// node-3 dies with its host, its boxes sealed first: each comes back on node-2 on its wake.
	lost := on["node-3"]
	for _, id := range lost {
		snap, err := d.Boxes.Snapshot(ctx, owner.ID, id)
		if err != nil {
			t.Fatalf("snapshot box %s: %v", id, err)
		}
		// Exported by node-3's own worker, beside the engine that holds the box.
		if got := uploadQueues(ctx, t, d, snap.Snapshot.ID); !slices.Equal(got, []string{workflows.NodeTaskQueue("node-3")}) {
			t.Fatalf("box %s's snapshot was exported on %v, want node-3's queue alone", id, got)
		}
	}
	// A run pins the first of them, its step inside a tool call in the box when the node dies.
	pinned, idle := lost[0], lost[1:]
	agents := cbv1.NewAgentServiceClient(e.conn)
	models.Script(
		modeltest.Calls(modeltest.Call("shell", `{"command":"sleep 600"}`)),
		modeltest.Reply("Done, on the box that came back."))
	run, err := agents.StartRun(e.as(ctx, admin), &cbv1.StartRunRequest{Box: string(pinned), Task: "Wait a while."})
	if err != nil {
		t.Fatal(err)
	}
	var seen string
	pinnedOn, err := d.Boxes.Get(ctx, owner.ID, pinned)
	if err != nil {
		t.Fatal(err)
	}
	ref := sandboxRef(ctx, t, ns[2].client, pinnedOn.SandboxID)
	testutil.Eventually(t, 2*time.Minute, "the run's tool call runs in the box on node-3", func() bool {
		// The desktop's own scripts start sleeps too: this one is the tool call's.
		res, err := ns[2].client.Exec(ctx, ref, sandbox.ExecRequest{Argv: []string{"pgrep", "-f", "sleep 600"}})
		seen = fmt.Sprintf("%d model calls; pgrep: %+v, %v", len(models.Requests()), res, err)
		return err == nil && res.ExitCode == 0 && len(models.Requests()) == 1
	}, &seen)

	ns[2].kill()
	hosts.Remove(t, 2)
	testutil.Eventually(t, 2*time.Minute, "node-3 lost and its idle boxes failed", func() bool {
		failed := 0
		for _, id := range idle {
			if v, err := d.Boxes.Get(ctx, owner.ID, id); err == nil && v.State == cocoonbox.BoxStateFailed {
				failed++
			}
		}
		seen = fmt.Sprintf("%d of %d failed", failed, len(idle))
		return failed == len(idle)
	}, &seen)
	// The run goes on once its box is back, from its snapshot, on the remaining node.
	var got *cbv1.AgentRun
	testutil.Eventually(t, 5*time.Minute, "the run finishes on the box brought back", func() bool {
		got, err = agents.GetRun(e.as(ctx, admin), &cbv1.GetRunRequest{RunId: run.GetId()})
		seen = fmt.Sprintf("%s %q %v", got.GetState(), got.GetError(), err)
		return err == nil && slices.Contains([]string{"succeeded", "failed", "cancelled"}, got.GetState())
	}, &seen)
	if got.GetState() != "succeeded" || got.GetResult() != "Done, on the box that came back." || len(models.Requests()) != 2 {
		t.Fatalf("the run after node-3's loss: %s %q %q after %d model calls", got.GetState(), got.GetError(), got.GetResult(), len(models.Requests()))
	}
	intact(pinned)
	for _, id := range idle {
		if v, err := d.Boxes.Wake(ctx, owner.ID, id); err != nil || v.State != cocoonbox.BoxStateRunning {
			t.Fatalf("wake box %s after its node was lost: %+v, %v", id, v.Status, err)
		}
		intact(id)
		// Restored by node-2's own worker, the object streamed from S3 into the engine beside it.
		if got := activityQueues(ctx, t, d, workflows.BoxWorkflowID(id), "RestoreSnapshot"); len(got) == 0 || got[len(got)-1] != workflows.NodeTaskQueue("node-2") {
			t.Fatalf("box %s's restore was scheduled on %v, want node-2's queue last", id, got)
		}
	}
	on = boxesOn(ctx, t, d, ids)
	if len(on["node-2"]) != 12 {
		t.Fatalf("boxes per node after node-3's loss: %v; want all 12 on node-2", counts(on))
	}
	for _, id := range boxes {
		if !slices.Contains(on["node-2"], id) {
			t.Errorf("box %s is not on node-2", id)
		}
	}
}

// boxesOn is the boxes each node holds, by the store's records.
func boxesOn(ctx context.Context, t *testing.T, d *devstack.Dev, ids []string) map[string][]cocoonbox.BoxID {
	t.Helper()
	all, err := d.Store.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]cocoonbox.BoxID{}
	for _, n := range all {
		if !slices.Contains(ids, n.ID) {
			continue
		}
		held, err := d.Store.SandboxesOn(ctx, nodes.Node{ID: n.ID})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range held {
			out[n.ID] = append(out[n.ID], cocoonbox.BoxID(s.BoxID))
		}
	}
	return out
}

func counts(on map[string][]cocoonbox.BoxID) map[string]int {
	c := map[string]int{}
	for id, b := range on {
		c[id] = len(b)
	}
	return c
}

// dialReplica is a box client of the API at url.
func dialReplica(t *testing.T, url string) cbv1.BoxServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return cbv1.NewBoxServiceClient(conn)
}

// relayTCP relays connections to a free port of host to target until the test ends, and returns
// the address it listens on.
func relayTCP(t *testing.T, host, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{})
				go func() {
					_, _ = io.Copy(up, c)
					_ = up.(*net.TCPConn).CloseWrite()
					close(done)
				}()
				_, _ = io.Copy(c, up)
				_ = c.(*net.TCPConn).CloseWrite()
				<-done
			})
		}
	})
	return ln.Addr().String()
}
