package devstack_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/devstack"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// nodesBurst is how many creates a burst of BenchmarkNodes starts at once.
const nodesBurst = 12

// BenchmarkNodes: what more engine nodes buy and what moving boxes costs. Creates per second: a
// burst of 12 creates started at once (cold, no warm pool) on the stack's one node, then on three
// (two more, each an engine with its own worker); their rate is 12 over the burst's time. A drain
// moves four boxes off a node (admin drain --wait), per box; beside it one snapshot and one
// restore of a box by hand, which is what a move does.
func BenchmarkNodes(b *testing.B) {
	cfg := benchConfig(b, filepath.Join(b.TempDir(), "home"))
	cfg.Quota.Boxes = 2 * nodesBurst
	d, err := devstack.Start(context.Background(), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	owner, err := d.Store.UserByName(ctx, "admin")
	if err != nil {
		b.Fatal(err)
	}
	const rounds = 5
	burst := func(name string) []time.Duration {
		var samples []time.Duration
		for r := range rounds {
			ids := make([]cocoonbox.BoxID, nodesBurst)
			errs := make([]error, nodesBurst)
			var wg sync.WaitGroup
			start := time.Now()
			for i := range ids {
				ids[i] = cocoonbox.NewBoxID()
				wg.Go(func() {
					_, errs[i] = d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: ids[i], Name: fmt.Sprintf("%s-%d-%d", name, r, i), Size: cocoonbox.SizeSmall})
				})
			}
			wg.Wait()
			samples = append(samples, time.Since(start))
			for i, id := range ids {
				if errs[i] != nil {
					b.Fatalf("create %d of a burst on %s: %v", i, name, errs[i])
				}
				if _, err := d.Boxes.Delete(ctx, owner.ID, id); err != nil {
					b.Fatal(err)
				}
			}
		}
		return samples
	}
	one := burst("one")
	startNode(ctx, b, cfg, d, "node-b")
	startNode(ctx, b, cfg, d, "node-c")
	three := burst("three")

	// Four boxes on the stack's own node (the others drained meanwhile), then drained off it;
	// then back, off node-b and node-c.
	e, admin := devAPI(b, d)
	drain := func(node string, undo bool) *cbv1.Node {
		n, err := e.box.DrainNode(e.as(ctx, admin), &cbv1.DrainNodeRequest{Node: node, Undo: undo, Wait: !undo})
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	drain("node-b", false)
	drain("node-c", false)
	var boxes []cocoonbox.BoxID
	for i := range 4 {
		id := cocoonbox.NewBoxID()
		if _, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: id, Name: fmt.Sprintf("moved-%d", i), Size: cocoonbox.SizeSmall}); err != nil {
			b.Fatal(err)
		}
		boxes = append(boxes, id)
	}
	drain("node-b", true)
	drain("node-c", true)
	var perBox []time.Duration
	timeDrain := func(node string) {
		start := time.Now()
		n := drain(node, false)
		if moved := len(n.GetDrain().GetMoved()); moved > 0 {
			perBox = append(perBox, time.Since(start)/time.Duration(moved))
		}
		if len(n.GetDrain().GetFailed()) > 0 {
			b.Fatalf("drain %s: %v", node, n.GetDrain().GetFailed())
		}
		drain(node, true)
	}
	timeDrain(devstack.LocalNode)
	timeDrain("node-b")
	timeDrain("node-c")
	var byHand []time.Duration
	for _, id := range boxes[:3] {
		start := time.Now()
		snap, err := d.Boxes.Snapshot(ctx, owner.ID, id)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := d.Boxes.Restore(ctx, owner.ID, id, snap.Snapshot.ID); err != nil {
			b.Fatal(err)
		}
		byHand = append(byHand, time.Since(start))
	}

	report := func(name string, f func(b *testing.B)) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() { // the samples are taken; the sub-benchmark only reports them
			}
			f(b)
		})
	}
	report("CreatesPerSecond/ThreeNodes", func(b *testing.B) { benchreport.Rate(b, nodesBurst, "creates/s", three) })
	report("CreatesPerSecond/RawOneNode", func(b *testing.B) { benchreport.Rate(b, nodesBurst, "creates/s", one) })
	report("Drain/PerBox", func(b *testing.B) { benchreport.Latency(b, perBox) })
	report("Drain/RawSnapshotRestore", func(b *testing.B) { benchreport.Latency(b, byHand) })
}
