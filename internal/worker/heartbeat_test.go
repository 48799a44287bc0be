package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/sandbox/sandboxtest"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestHeartbeat: a node's worker registers the node with what its engine reports (boxes and
// their sizes' memory), and a beat marks lost a peer that has been silent for too long and tells
// each box whose sandbox the peer held, once.
func TestHeartbeat(t *testing.T) {
	ctx := context.Background()
	st, conn := storetest.NewWithSQL(t)
	const root = "root"
	eng := sandboxtest.New(t, sandboxtest.Options{RootToken: root})
	c := eng.Client(root)
	if _, err := c.Claim(ctx, sandbox.ClaimRequest{Template: "base", Size: sandbox.SizeSmall, ClaimRef: "bx_1/1"}); err != nil {
		t.Fatal(err)
	}
	var told []string
	h := &Heartbeat{Store: st, Engine: c, Node: nodes.Node{ID: "node-a", URL: eng.URL}, DeadAfter: time.Minute, Logger: slog.New(slog.DiscardHandler),
		TellLost: func(_ context.Context, box cocoonbox.BoxID, sandboxID, node string) error {
			told = append(told, string(box)+" "+sandboxID+" "+node)
			return nil
		}}
	peer := nodes.Node{ID: "node-b", URL: "http://10.0.0.2:7777"}
	if _, err := st.HeartbeatNode(ctx, peer); err != nil {
		t.Fatal(err)
	}
	u, err := st.CreateUser(ctx, store.NewUser{Name: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	// Two boxes on the peer (one named by its node, one recorded before nodes were named, by the
	// address alone), one elsewhere.
	for i, at := range []struct{ addr, node string }{{"", peer.ID}, {peer.URL, ""}, {eng.URL, "node-a"}} {
		id := cocoonbox.BoxID(fmt.Sprintf("bx_00000000000000b%d", i))
		if _, err := st.CreateBox(ctx, store.NewBox{ID: id, Owner: u.ID, Name: fmt.Sprintf("b%d", i), Size: cocoonbox.SizeSmall}); err != nil {
			t.Fatal(err)
		}
		if err := st.SetSandboxToken(ctx, id, fmt.Sprintf("sb_00000000000000b%d", i), at.addr, at.node, []byte("sealed")); err != nil {
			t.Fatal(err)
		}
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
	if want := []string{"bx_00000000000000b0 sb_00000000000000b0 node-b", "bx_00000000000000b1 sb_00000000000000b1 node-b"}; !slices.Equal(told, want) {
		t.Fatalf("told %v, want %v", told, want)
	}
	if err := h.Beat(ctx); err != nil || len(told) != 2 {
		t.Fatalf("a beat after: %v; told %v, want no one again", err, told)
	}
}
