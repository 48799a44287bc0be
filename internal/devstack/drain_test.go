package devstack_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/images"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/worker"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
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

	_, token := d.Sandbox()
	other := startEngineNode(ctx, t, cfg, d, "node-b", token)

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
	for _, ref := range []sandbox.SandboxRef{runRef, sleepRef} {
		if _, err := eng.Get(ctx, ref.ID); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("the drained node still holds sandbox %s: %v", ref.ID, err)
		}
	}
}

// startEngineNode runs a second gVisor engine in this process, with the dev stack's image cache
// and engine token, registered as node id by a heartbeat like a worker's; its boxes are released
// and it stops when the test ends. It returns a root client of it.
func startEngineNode(ctx context.Context, t *testing.T, cfg config.Dev, d *devstack.Dev, id, token string) *sandbox.HTTP {
	t.Helper()
	dir := shortTemp(t)
	rt, err := runtime.New(runtime.NameGVisor, runtime.Options{DataDir: filepath.Join(dir, "runtime")})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Dir: filepath.Join(dir, "engine"), Runtime: rt, Images: images.Resolver(cfg.ImageCache),
		RootToken: token, OwnerAddr: ln.Addr().String(), Logger: slog.New(slog.DiscardHandler)})
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
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if rows, err := c.List(cctx, ""); err == nil {
			for _, r := range rows {
				if full, err := c.Get(cctx, r.ID); err == nil {
					_ = c.Release(cctx, sandbox.SandboxRef{ID: full.ID, Token: full.Token})
				}
			}
		}
		stopServing()
		<-served
		_ = e.Close()
		if cl, ok := rt.(interface{ Close() error }); ok {
			_ = cl.Close()
		}
	})
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("node %s listens at %s", id, url)
	}
	return c
}
