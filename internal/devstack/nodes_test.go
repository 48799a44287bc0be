package devstack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loomhand/cocoonbox/internal/config"
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
	conn, err := grpc.NewClient(strings.TrimPrefix(d.URLs().API, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	cli, err := config.LoadCLI(d.Bootstrap().CLIConfig, config.MapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	e := apiEnv{d: d, conn: conn, box: cbv1.NewBoxServiceClient(conn)}
	engineURL, _ := d.Sandbox()
	// The first beat is at the worker's start; a later one carries the box just made.
	err = testutil.Poll(ctx, 30*time.Second, func() error {
		resp, err := e.box.ListNodes(e.as(ctx, cli.Token), &cbv1.ListNodesRequest{})
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
