package devstack_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/testutil"
	"github.com/loomhand/cocoonbox/internal/worker"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
	"github.com/loomhand/cocoonbox/workflows"
)

// TestDrainMovesBoxes: with a second engine node registered, an admin drains the dev stack's own
// node and waits. Its running box is snapshotted and restored on the other node with its files,
// its old sandbox released; its hibernated box stays asleep until its wake, which moves it too.
func TestDrainMovesBoxes(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	d, ctx, owner, eng := newBoxEnv(t, cfg, 8*time.Minute)
	create := func(name string) (cocoonbox.BoxID, sandbox.SandboxRef) {
		id := cocoonbox.NewBoxID()
		st, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: id, Name: name, Size: cocoonbox.SizeSmall})
		if err != nil || st.State != cocoonbox.BoxStateRunning {
			t.Fatalf("create %s: %+v, %v", name, st.Status, err)
		}
		return id, sandboxRef(ctx, t, eng, st.SandboxID)
	}
	running, runRef := create("moving")
	sleeping, sleepRef := create("sleeping")
	const write = "head -c 4M /dev/urandom > /root/kept && sha256sum /root/kept"
	runSum, sleepSum := mustExec(ctx, t, eng, runRef, write), mustExec(ctx, t, eng, sleepRef, write)
	if _, err := d.Boxes.Hibernate(ctx, owner.ID, sleeping); err != nil {
		t.Fatal(err)
	}

	other := startNode(ctx, t, cfg, d, "node-b").client

	e, admin := devAPI(t, d)
	n, err := e.box.DrainNode(e.as(ctx, admin), &cbv1.DrainNodeRequest{Node: devstack.LocalNode, Wait: true})
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	drain := n.GetDrain()
	if !slices.Equal(drain.GetMoved(), []string{string(running)}) || !slices.Equal(drain.GetOnWake(), []string{string(sleeping)}) || len(drain.GetFailed()) != 0 {
		t.Fatalf("drain: %v; want %s moved and %s on its wake", drain, running, sleeping)
	}
	onOther := func(id cocoonbox.BoxID, sum string) {
		t.Helper()
		v, err := d.Boxes.Get(ctx, owner.ID, id)
		if err != nil || v.State != cocoonbox.BoxStateRunning {
			t.Fatalf("box %s after the move: %+v, %v", id, v.Status, err)
		}
		if _, err := other.Get(ctx, v.SandboxID); err != nil {
			t.Fatalf("box %s's sandbox %s is not on node-b: %v", id, v.SandboxID, err)
		}
		got, err := d.Boxes.Exec(ctx, owner.ID, id, boxsvc.ExecRequest{Argv: []string{"sha256sum", "/root/kept"}})
		if err != nil || got.Stdout != sum {
			t.Fatalf("box %s's file after the move: %q, %v; want %q", id, got.Stdout, err, sum)
		}
		events, err := d.Store.EventsForBox(ctx, string(id), 100)
		if err != nil || !slices.ContainsFunc(events, func(ev store.Event) bool { return ev.Action == "box.moved" }) {
			t.Errorf("box %s's events do not say it moved: %v", id, err)
		}
	}
	onOther(running, runSum)
	if v, err := d.Boxes.Get(ctx, owner.ID, sleeping); err != nil || v.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("the hibernated box after the drain: %+v, %v; want it asleep", v.Status, err)
	}
	if _, err := d.Boxes.Wake(ctx, owner.ID, sleeping); err != nil {
		t.Fatalf("wake the box that moves on its wake: %v", err)
	}
	onOther(sleeping, sleepSum)
	// A move answers before the release of the sandbox it replaced ends (releaseReplaced).
	for _, ref := range []sandbox.SandboxRef{runRef, sleepRef} {
		testutil.EventuallyReports(t, testutil.WaitShort, "the drained node to release sandbox "+ref.ID, func() (bool, string) {
			_, err := eng.Get(ctx, ref.ID)
			return errors.Is(err, sandbox.ErrNotFound), fmt.Sprint(err)
		})
	}
}

// startNode starts engine node id beside the dev stack, with a worker of its own, and waits until
// its heartbeat registered it.
func startNode(ctx context.Context, t testing.TB, cfg config.Dev, d *devstack.Dev, id string) *engineNode {
	t.Helper()
	wcfg := workerConfig(d)
	wcfg.Node, wcfg.NodeDeadAfter = id, cfg.NodeDeadAfter
	// Its worker takes any task of the shared queue, as every worker of a deployment does, so
	// it has the stack's template and model gateway too.
	wcfg.Template, wcfg.Agent = cmp.Or(cfg.Template, wcfg.Template), cfg.Agent
	n := startEngineNodeChild(t, cfg.ImageCache, wcfg)
	testutil.Eventually(t, testutil.WaitShort, "node "+id+" registered", func() bool {
		all, err := d.Store.ListNodes(ctx)
		return err == nil && slices.ContainsFunc(all, func(x nodes.Node) bool { return x.ID == id && x.URL == n.url && x.MemoryMiB > 0 })
	})
	return n
}

// TestLostNodeBoxComesBack: a box runs on a second engine node, with a snapshot of its files;
// the node dies whole (its engine and worker SIGKILLed). Once the heartbeats mark it lost the
// box is told, fails naming the loss, and its next wake brings it back on the remaining node from
// the snapshot, files and all.
func TestLostNodeBoxComesBack(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.NodeDeadAfter = 25 * time.Second // beats come every 10 s
	d, ctx, owner, eng := newBoxEnv(t, cfg, 8*time.Minute)
	other := startNode(ctx, t, cfg, d, "node-b")

	id, st := createOffLocal(ctx, t, d, owner.ID, "on-b")
	ref := sandboxRef(ctx, t, other.client, st.SandboxID) // on node-b, or the test fails here
	sum := mustExec(ctx, t, other.client, ref, "head -c 4M /dev/urandom > /root/kept && sha256sum /root/kept")
	if _, err := d.Boxes.Snapshot(ctx, owner.ID, id); err != nil {
		t.Fatal(err)
	}

	other.kill()
	var seen string
	testutil.Eventually(t, 2*time.Minute, "node-b marked lost and its box failed", func() bool {
		v, err := d.Boxes.Get(ctx, owner.ID, id)
		seen = fmt.Sprintf("%s %q %v", v.State, v.LastError, err)
		return err == nil && v.State == cocoonbox.BoxStateFailed
	}, &seen)
	v, err := d.Boxes.Wake(ctx, owner.ID, id)
	if err != nil || v.State != cocoonbox.BoxStateRunning || v.RestoredFrom.SnapshotID == "" {
		t.Fatalf("wake after the loss: %+v, %v", v.Status, err)
	}
	if _, err := eng.Get(ctx, v.SandboxID); err != nil {
		t.Fatalf("the box came back on sandbox %s, not on the remaining node: %v", v.SandboxID, err)
	}
	got, err := d.Boxes.Exec(ctx, owner.ID, id, boxsvc.ExecRequest{Argv: []string{"sha256sum", "/root/kept"}})
	if err != nil || got.Stdout != sum {
		t.Fatalf("the file after the loss: %q, %v; want %q", got.Stdout, err, sum)
	}
}

// TestSnapshotWithoutNodeWorker: a box on a node whose own worker does not run (its engine
// answers, its queue has no poller) is still snapshotted and restored: the export, and the
// restore placed there, wait for that node's worker for nodeQueueWait and then run on the shared
// queue, from any worker.
func TestSnapshotWithoutNodeWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	d, ctx, owner, _ := newBoxEnv(t, cfg, 5*time.Minute)
	_, token := d.Sandbox()
	bare := startBareNode(ctx, t, cfg, d, "node-x", token)
	id, st := createOffLocal(ctx, t, d, owner.ID, "on-x")
	if _, err := bare.Get(ctx, st.SandboxID); err != nil {
		t.Fatalf("the box is not on node-x: %v", err)
	}
	snap, err := d.Boxes.Snapshot(ctx, owner.ID, id)
	if err != nil || snap.Snapshot.State != cocoonbox.SnapshotComplete {
		t.Fatalf("snapshot of a box on a node without its worker: %+v, %v", snap.Snapshot, err)
	}
	if got, want := uploadQueues(ctx, t, d, snap.Snapshot.ID), []string{workflows.NodeTaskQueue("node-x"), workflows.TaskQueue}; !slices.Equal(got, want) {
		t.Fatalf("the export was scheduled on %v, want %v", got, want)
	}

	// A restore placed on node-x waits for its worker as long, then runs from any worker; the
	// local node drains meanwhile, so node-x is the only place for it.
	e, admin := devAPI(t, d)
	if _, err := e.box.DrainNode(e.as(ctx, admin), &cbv1.DrainNodeRequest{Node: devstack.LocalNode}); err != nil {
		t.Fatal(err)
	}
	v, err := d.Boxes.Restore(ctx, owner.ID, id, snap.Snapshot.ID)
	if err != nil || v.State != cocoonbox.BoxStateRunning {
		t.Fatalf("restore on a node without its worker: %+v, %v", v.Status, err)
	}
	if _, err := bare.Get(ctx, v.SandboxID); err != nil {
		t.Fatalf("the restored box is not on node-x: %v", err)
	}
	if got, want := activityQueues(ctx, t, d, workflows.BoxWorkflowID(id), "RestoreSnapshot"), []string{workflows.NodeTaskQueue("node-x"), workflows.TaskQueue}; !slices.Equal(got, want) {
		t.Fatalf("the restore was scheduled on %v, want %v", got, want)
	}
}

// createOffLocal creates box name on another node than the stack's own, which takes no box while
// it drains for the create.
func createOffLocal(ctx context.Context, t *testing.T, d *devstack.Dev, owner, name string) (cocoonbox.BoxID, boxsvc.View) {
	t.Helper()
	e, admin := devAPI(t, d)
	if _, err := e.box.DrainNode(e.as(ctx, admin), &cbv1.DrainNodeRequest{Node: devstack.LocalNode}); err != nil {
		t.Fatal(err)
	}
	id := cocoonbox.NewBoxID()
	st, err := d.Boxes.Create(ctx, owner, boxsvc.CreateRequest{ID: id, Name: name, Size: cocoonbox.SizeSmall})
	if err != nil || st.State != cocoonbox.BoxStateRunning {
		t.Fatalf("create %s: %+v, %v", name, st.Status, err)
	}
	if _, err := e.box.DrainNode(e.as(ctx, admin), &cbv1.DrainNodeRequest{Node: devstack.LocalNode, Undo: true}); err != nil {
		t.Fatal(err)
	}
	return id, st
}

// uploadQueues are the task queues snapshot id's export was scheduled on, in order.
func uploadQueues(ctx context.Context, t *testing.T, d *devstack.Dev, id string) []string {
	t.Helper()
	return activityQueues(ctx, t, d, workflows.SnapshotWorkflowID(id), "UploadSnapshot")
}

// activityQueues are the task queues workflow wid scheduled activity act on, in order.
func activityQueues(ctx context.Context, t *testing.T, d *devstack.Dev, wid, act string) []string {
	t.Helper()
	var queues []string
	it := d.Temporal.GetWorkflowHistory(ctx, wid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == act {
			queues = append(queues, a.GetTaskQueue().GetName())
		}
	}
	return queues
}

// startBareNode runs an engine node in this process without a worker of its own: a gVisor engine
// registered as node id by a heartbeat like a worker's, with the dev stack's images and engine
// token. Its boxes are released and it stops when the test ends. It returns a root client of it.
func startBareNode(ctx context.Context, t *testing.T, cfg config.Dev, d *devstack.Dev, id, token string) *sandbox.HTTP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e, rt, err := newNodeEngine(engineNodeConfig{Dir: shortTemp(t), ImageCache: cfg.ImageCache}, token, ln, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stopServing := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.Serve(serveCtx, ln) }()
	url := "http://" + ln.Addr().String()
	c := sandbox.NewHTTP(url, token, &http.Client{Timeout: time.Minute})
	h := &worker.Heartbeat{Store: d.Store, Engine: c, Node: nodes.Node{ID: id, URL: url}, Logger: slog.New(slog.DiscardHandler)}
	if err := h.Beat(ctx); err != nil {
		t.Fatalf("register node %s: %v", id, err)
	}
	stopBeat := worker.StartHeartbeat(h)
	t.Cleanup(func() {
		stopBeat()
		releaseAll(c)
		stopServing()
		<-served
		_ = e.Close()
		if cl, ok := rt.(io.Closer); ok {
			_ = cl.Close()
		}
	})
	return c
}
