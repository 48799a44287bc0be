package devstack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// TestLocalNodeRegisters: the dev stack's engine is its node "local", registered by the
// heartbeat of the worker beside it with what the engine reports (its address, the memory it
// admits boxes up to, its boxes), and an admin sees it through the API.
func TestLocalNodeRegisters(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, eng := newBoxEnv(t, boxConfig(t), 3*time.Minute)
	createBox(ctx, t, d, owner.ID, eng)
	e, admin := devAPI(t, d)
	engineURL, _ := d.Sandbox()
	// The first beat is at the worker's start; a later one carries the box just made.
	err := testutil.Poll(ctx, 30*time.Second, func() error {
		resp, err := e.box.ListNodes(e.as(ctx, admin), &cbv1.ListNodesRequest{})
		if err != nil {
			return err
		}
		for _, n := range resp.GetNodes() {
			if n.GetId() == devstack.LocalNode && n.GetUrl() == engineURL && n.GetState() == "active" &&
				n.GetMemoryMib() > 0 && n.GetBoxes() >= 1 && n.GetCommittedMib() >= 512 {
				return nil
			}
		}
		return fmt.Errorf("nodes: %v", resp.GetNodes())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDrainedNodeTakesNoBox: an admin drains the stack's one node through the API; a create then
// gets no sandbox and fails naming the drain, the box already on the node keeps running (the
// drain has nowhere to move it, leaves it untouched and says so), and
// after the drain is undone a create runs again. A user who is not an admin may not drain.
func TestDrainedNodeTakesNoBox(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.CreateWait = 3 * time.Second
	d, ctx, owner, eng := newBoxEnv(t, cfg, 3*time.Minute)
	before, _ := createBox(ctx, t, d, owner.ID, eng)
	e, admin := devAPI(t, d)
	_, userToken := e.user(ctx, t, "uma")
	if _, err := e.box.DrainNode(e.as(ctx, userToken), &cbv1.DrainNodeRequest{Node: devstack.LocalNode}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a user's drain: %v, want permission denied", err)
	}
	if _, err := e.box.DrainNode(e.as(ctx, admin), &cbv1.DrainNodeRequest{Node: devstack.LocalNode, Parallel: 17}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "parallel") {
		t.Fatalf("a drain of 17 boxes at once: %v, want invalid argument naming parallel", err)
	}
	n, err := e.box.DrainNode(e.as(ctx, admin), &cbv1.DrainNodeRequest{Node: devstack.LocalNode, Wait: true, Parallel: 2})
	if err != nil || n.GetState() != "draining" {
		t.Fatalf("drain: %v, %v", n, err)
	}
	// With no other node, the box has nowhere to go: it stays, untouched, and the drain says why.
	if f := n.GetDrain().GetFailed(); len(f) != 1 || f[0].GetBox() != string(before) || !strings.Contains(f[0].GetReason(), "draining") {
		t.Fatalf("drain of the only node: %v; want its box named as staying, the node draining", n.GetDrain())
	}
	_, err = d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: cocoonbox.NewBoxID(), Name: "drained", Size: cocoonbox.SizeSmall})
	if cocoonbox.ErrorCode(err) != cocoonbox.ENoCapacity || !strings.Contains(err.Error(), devstack.LocalNode+" is draining") {
		t.Fatalf("a create on a drained node: %v (%s); want no_capacity saying the node is draining", err, cocoonbox.ErrorCode(err))
	}
	if st, err := d.Boxes.Exec(ctx, owner.ID, before, boxsvc.ExecRequest{Argv: []string{"true"}}); err != nil || st.ExitCode != 0 {
		t.Fatalf("the box already on the drained node: %+v, %v", st, err)
	}
	if n, err := e.box.DrainNode(e.as(ctx, admin), &cbv1.DrainNodeRequest{Node: devstack.LocalNode, Undo: true}); err != nil || n.GetState() != "active" {
		t.Fatalf("undo: %v, %v", n, err)
	}
	if st, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: cocoonbox.NewBoxID(), Name: "undrained", Size: cocoonbox.SizeSmall}); err != nil || st.State != cocoonbox.BoxStateRunning {
		t.Fatalf("a create after the undo: %+v, %v", st.State, err)
	}
}
