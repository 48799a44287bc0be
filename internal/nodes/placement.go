// Package nodes is what the control plane knows of its engine nodes: each node's record (its
// engine's address, capacity and load, refreshed by the heartbeat of the worker beside it), and
// placement, the choice of a node for a new box. It holds no workflow or Temporal code: the
// records live in PostgreSQL (internal/store) and placement is a pure function of them.
package nodes

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox"
)

// State is where a node is in its life.
type State string

const (
	// Active nodes take new boxes.
	Active State = "active"
	// Draining nodes take no new boxes (Pick skips them), and their boxes are moved to others
	// (cocoonbox admin drain).
	Draining State = "draining"
	// Lost nodes stopped their heartbeat for DeadAfter: their boxes come back elsewhere from
	// their newest sealed snapshot.
	Lost State = "lost"
)

// DefaultDeadAfter is how long a node's heartbeat may be silent before the node is lost.
const DefaultDeadAfter = time.Minute

// Node is one engine node as the control plane sees it.
type Node struct {
	ID    string
	URL   string // the engine's sandboxd API
	State State
	// MemoryMiB is what the engine admits boxes' sizes up to (its host memory less its
	// reserve, times its overcommit); CommittedMiB what the sizes of its boxes add up to.
	MemoryMiB    int64
	CommittedMiB int64
	MaxBoxes     int
	Boxes        int // claimed, hibernated ones included
	Hibernated   int
	// Warm is the count of ready boxes per pool, keyed "template/size/net" (PoolKey).
	Warm        map[string]int
	HeartbeatAt time.Time
}

// PoolKey names a warm pool in Node.Warm.
func PoolKey(template string, size cocoonbox.Size, net string) string {
	return template + "/" + string(size) + "/" + net
}

// FreeMiB is the memory a new box's size may still take on the node.
func (n Node) FreeMiB() int64 { return n.MemoryMiB - n.CommittedMiB }

// Request is what a new box needs of its node.
type Request struct {
	Template string
	Size     cocoonbox.Size
	Net      string // the network lane: "none" or "egress"
}

// Pick chooses the node for a new box at now: of the active nodes whose heartbeat is within
// deadAfter and which have room (a box slot and the size's memory), one with a ready box in the
// request's warm pool, then the most free memory, then the fewest boxes, then the ID. When none
// fits, the error is no_capacity and says what each node lacked.
func Pick(all []Node, req Request, now time.Time, deadAfter time.Duration) (Node, error) {
	need := int64(req.Size.Spec().MemoryMB)
	key := PoolKey(req.Template, req.Size, req.Net)
	var fits []Node
	var why []string
	for _, n := range all {
		switch {
		case n.State != Active:
			why = append(why, fmt.Sprintf("%s is %s", n.ID, n.State))
		case now.Sub(n.HeartbeatAt) > deadAfter:
			why = append(why, fmt.Sprintf("%s has not reported since %s", n.ID, n.HeartbeatAt.UTC().Format(time.RFC3339)))
		case n.MaxBoxes > 0 && n.Boxes >= n.MaxBoxes:
			why = append(why, fmt.Sprintf("%s holds its %d boxes", n.ID, n.MaxBoxes))
		case n.FreeMiB() < need:
			why = append(why, fmt.Sprintf("%s has %d MiB free", n.ID, n.FreeMiB()))
		default:
			fits = append(fits, n)
		}
	}
	if len(fits) == 0 {
		if len(why) == 0 {
			why = append(why, "no engine node is registered")
		}
		return Node{}, cocoonbox.Errorf(cocoonbox.ENoCapacity, "no node can take a %s box (%d MiB): %s", req.Size, need, strings.Join(why, "; "))
	}
	return slices.MinFunc(fits, func(a, b Node) int {
		return cmp.Or(
			-cmp.Compare(min(a.Warm[key], 1), min(b.Warm[key], 1)),
			-cmp.Compare(a.FreeMiB(), b.FreeMiB()),
			cmp.Compare(a.Boxes, b.Boxes),
			strings.Compare(a.ID, b.ID),
		)
	}), nil
}
