package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestNodes: a node registers with its first heartbeat and each beat refreshes its load; one
// silent for longer than node_dead_after is marked lost, and beating again makes it active.
func TestNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, conn := storetest.NewWithSQL(t)
	a := nodes.Node{ID: "node-a", URL: "http://10.0.0.1:7777", MemoryMiB: 8192, CommittedMiB: 1024, MaxBoxes: 20, Boxes: 2,
		Warm: map[string]int{nodes.PoolKey("base", "small", "none"): 1}}
	got, err := st.HeartbeatNode(ctx, a)
	if err != nil || got.State != nodes.Active || got.Warm[nodes.PoolKey("base", "small", "none")] != 1 {
		t.Fatalf("first heartbeat = %+v, %v", got, err)
	}
	a.Boxes, a.CommittedMiB = 3, 1536
	if got, err = st.HeartbeatNode(ctx, a); err != nil || got.Boxes != 3 || got.CommittedMiB != 1536 {
		t.Fatalf("second heartbeat = %+v, %v", got, err)
	}
	if _, err := st.HeartbeatNode(ctx, nodes.Node{ID: "node-b", URL: "http://10.0.0.2:7777"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.HeartbeatNode(ctx, nodes.Node{ID: "Bad ID", URL: "x"}); err == nil {
		t.Fatal("a malformed node ID was registered")
	}
	if _, err := conn.Exec(ctx, `UPDATE nodes SET heartbeat_at = now() - interval '2 minutes' WHERE id = 'node-b'`); err != nil {
		t.Fatal(err)
	}
	lost, err := st.MarkLostNodes(ctx, time.Minute)
	if err != nil || len(lost) != 1 || lost[0].ID != "node-b" || lost[0].State != nodes.Lost {
		t.Fatalf("MarkLostNodes = %v, %v; want node-b alone", lost, err)
	}
	list, err := st.ListNodes(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "node-a" || list[0].State != nodes.Active || list[1].State != nodes.Lost {
		t.Fatalf("ListNodes = %+v, %v", list, err)
	}
	if back, err := st.HeartbeatNode(ctx, nodes.Node{ID: "node-b", URL: "http://10.0.0.2:7777"}); err != nil || back.State != nodes.Active {
		t.Fatalf("a lost node beating again: %+v, %v; want it active", back, err)
	}
}

// TestNodeDraining: an operator drains a node and undoes it; its heartbeats keep it draining
// meanwhile; a lost node and an unknown one are refused, naming why.
func TestNodeDraining(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, conn := storetest.NewWithSQL(t)
	a := nodes.Node{ID: "node-a", URL: "http://10.0.0.1:7777"}
	if _, err := st.HeartbeatNode(ctx, a); err != nil {
		t.Fatal(err)
	}
	if n, err := st.SetNodeDraining(ctx, "node-a", true); err != nil || n.State != nodes.Draining {
		t.Fatalf("drain: %+v, %v", n, err)
	}
	if n, err := st.HeartbeatNode(ctx, a); err != nil || n.State != nodes.Draining {
		t.Fatalf("a heartbeat of a draining node: %+v, %v; want it still draining", n, err)
	}
	if n, err := st.SetNodeDraining(ctx, "node-a", false); err != nil || n.State != nodes.Active {
		t.Fatalf("undo: %+v, %v", n, err)
	}
	if _, err := conn.Exec(ctx, `UPDATE nodes SET state = 'lost' WHERE id = 'node-a'`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetNodeDraining(ctx, "node-a", true); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("drain a lost node: %v, want a conflict saying it is lost", err)
	}
	if _, err := st.SetNodeDraining(ctx, "node-z", true); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("drain an unknown node: %v, want not found", err)
	}
}

// TestNotePlaced: a box placed on a node counts in its record at once, and the node's next
// heartbeat, which carries the engine's own figures, replaces the count.
func TestNotePlaced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	a := nodes.Node{ID: "node-a", URL: "http://10.0.0.1:7777", MemoryMiB: 8192, CommittedMiB: 1024, Boxes: 2}
	if _, err := st.HeartbeatNode(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := st.NotePlaced(ctx, "node-a", 512); err != nil {
		t.Fatal(err)
	}
	all, err := st.ListNodes(ctx)
	if err != nil || len(all) != 1 || all[0].CommittedMiB != 1536 || all[0].Boxes != 3 {
		t.Fatalf("after a placement: %+v, %v; want 1536 MiB committed in 3 boxes", all, err)
	}
	if n, err := st.HeartbeatNode(ctx, a); err != nil || n.CommittedMiB != 1024 || n.Boxes != 2 {
		t.Fatalf("the next heartbeat: %+v, %v; want the engine's figures", n, err)
	}
	if err := st.NotePlaced(ctx, "node-z", 512); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a placement on an unknown node: %v, want not found", err)
	}
}
