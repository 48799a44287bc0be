package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/sandbox/sandboxtest"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestHeartbeat: a node's worker registers the node with what its engine reports (boxes and
// their sizes' memory), and a beat marks lost a peer that has been silent for too long.
func TestHeartbeat(t *testing.T) {
	ctx := context.Background()
	st, conn := storetest.NewWithSQL(t)
	const root = "root"
	eng := sandboxtest.New(t, sandboxtest.Options{RootToken: root})
	c := eng.Client(root)
	if _, err := c.Claim(ctx, sandbox.ClaimRequest{Template: "base", Size: sandbox.SizeSmall, ClaimRef: "bx_1/1"}); err != nil {
		t.Fatal(err)
	}
	h := &Heartbeat{Store: st, Engine: c, Node: nodes.Node{ID: "node-a", URL: eng.URL}, DeadAfter: time.Minute, Logger: slog.New(slog.DiscardHandler)}
	peer := nodes.Node{ID: "node-b", URL: "http://10.0.0.2:7777"}
	if _, err := st.HeartbeatNode(ctx, peer); err != nil {
		t.Fatal(err)
	}
	if err := h.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := st.ListNodes(ctx)
	if err != nil || len(list) != 2 || list[0].ID != "node-a" || list[0].Boxes != 1 || list[0].URL != eng.URL || list[1].State != nodes.Active {
		t.Fatalf("after a beat: %+v, %v", list, err)
	}
	if _, err := conn.Exec(ctx, `UPDATE nodes SET heartbeat_at = now() - interval '2 minutes' WHERE id = 'node-b'`); err != nil {
		t.Fatal(err)
	}
	if err := h.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	list, err = st.ListNodes(ctx)
	if err != nil || list[1].ID != "node-b" || list[1].State != nodes.Lost || list[0].State != nodes.Active {
		t.Fatalf("after node-b went silent: %+v, %v; want node-b lost and node-a active", list, err)
	}
}
