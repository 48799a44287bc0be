package nodes

import (
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
)

// TestPick: placement skips nodes that are not active, silent or full, prefers a node with a
// ready box of the request's pool, then the most free memory, then the fewest boxes; with no
// node fitting, the refusal is no_capacity and names what each lacked.
func TestPick(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	node := func(id string, freeMiB int64, boxes int) Node {
		return Node{ID: id, State: Active, MemoryMiB: 8192, CommittedMiB: 8192 - freeMiB, MaxBoxes: 10, Boxes: boxes, HeartbeatAt: now.Add(-10 * time.Second)}
	}
	req := Request{Template: "desktop", Size: cocoonbox.SizeMedium, Net: "none"}
	warm := node("n-warm", 2048, 5)
	warm.Warm = map[string]int{PoolKey("desktop", cocoonbox.SizeMedium, "none"): 2, PoolKey("base", cocoonbox.SizeSmall, "none"): 3}
	otherPool := node("n-other-pool", 6144, 1)
	otherPool.Warm = map[string]int{PoolKey("base", cocoonbox.SizeSmall, "none"): 3}
	draining, silent, full, tight := node("n-draining", 8192, 0), node("n-silent", 8192, 0), node("n-full", 8192, 10), node("n-tight", 512, 0)
	draining.State = Draining
	silent.HeartbeatAt = now.Add(-2 * time.Minute)

	cases := []struct {
		name  string
		nodes []Node
		want  string
	}{
		{"a warm pool first", []Node{otherPool, warm, draining}, "n-warm"},
		{"then the most free memory", []Node{node("a", 2048, 0), node("b", 4096, 3), otherPool}, "n-other-pool"},
		{"then the fewest boxes", []Node{node("a", 4096, 3), node("b", 4096, 1)}, "b"},
		{"then the ID", []Node{node("b", 4096, 1), node("a", 4096, 1)}, "a"},
		{"none but the one that fits", []Node{draining, silent, full, tight, node("ok", 1024, 9)}, "ok"},
	}
	for _, tc := range cases {
		got, err := Pick(tc.nodes, req, now, DefaultDeadAfter)
		if err != nil || got.ID != tc.want {
			t.Errorf("%s: Pick = %s, %v; want %s", tc.name, got.ID, err, tc.want)
		}
	}

	_, err := Pick([]Node{draining, silent, full, tight}, req, now, DefaultDeadAfter)
	if cocoonbox.ErrorCode(err) != cocoonbox.ENoCapacity {
		t.Fatalf("no node fits: %v, want no_capacity", err)
	}
	for _, want := range []string{"n-draining is draining", "n-silent has not reported since", "n-full holds its 10 boxes", "n-tight has 512 MiB free", "medium box (1024 MiB)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if _, err := Pick(nil, req, now, DefaultDeadAfter); err == nil || !strings.Contains(err.Error(), "no engine node is registered") {
		t.Errorf("no nodes: %v", err)
	}
}
