package devstack_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/internal/nodes"
)

// BenchmarkPlacement: the placement decision a claim makes when engine nodes are registered (the
// node records read from the dev stack's PostgreSQL, then nodes.Pick), over 3 and 100 nodes (the
// stack's own and made-up peers), beside Pick alone on the same records (Raw): the read is what a
// claim pays.
func BenchmarkPlacement(b *testing.B) {
	d := benchDev(b)
	ctx := context.Background()
	registered := 1 // the stack's own engine, node local
	for _, n := range []int{3, 100} {
		for ; registered < n; registered++ {
			_, err := d.Store.HeartbeatNode(ctx, nodes.Node{
				ID: fmt.Sprintf("node-%03d", registered), URL: fmt.Sprintf("http://10.0.0.%d:7777", registered), State: nodes.Active,
				MemoryMiB: 24 << 10, CommittedMiB: int64(registered%7) << 10, MaxBoxes: 40, Boxes: registered % 11,
				Warm: map[string]int{nodes.PoolKey("base", cocoonbox.SizeSmall, "none"): registered % 3},
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		req := nodes.Request{Template: "base", Size: cocoonbox.SizeSmall, Net: "none"}
		var decision, pick []time.Duration
		for range 500 {
			start := time.Now()
			all, err := d.Store.ListNodes(ctx)
			if err != nil {
				b.Fatal(err)
			}
			picked := time.Now()
			if _, err := nodes.Pick(all, req, time.Now(), nodes.DefaultDeadAfter); err != nil {
				b.Fatal(err)
			}
			decision = append(decision, time.Since(start))
			pick = append(pick, time.Since(picked))
		}
		for _, r := range []struct {
			name    string
			samples []time.Duration
		}{{"Decision", decision}, {"RawPick", pick}} {
			benchreport.Taken(b, fmt.Sprintf("Nodes%d/%s", n, r.name), r.samples)
		}
	}
}
