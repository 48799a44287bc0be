package activities

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// nodeEngine is the engine of one node with the node's record: checkpoints and their disks live
// on the engine that made them, so a snapshot is exported from the node that holds the box and a
// restore imports into, and claims on, the node it was placed on.
type nodeEngine struct {
	sandbox.Client
	node string // the registered node's ID; "" when no record names this engine
	url  string // the node's address; "" for the worker's own engine (Client)
}

// engineAt is the client of the engine at addr (SandboxRef.Addr): c itself for an empty addr, its
// own engine's, or a client that cannot reach other engines.
func engineAt(c sandbox.Client, addr string) sandbox.Client {
	if d, ok := c.(sandbox.NodeDialer); ok && addr != "" {
		return d.At(addr)
	}
	return c
}

// boxEngine is the engine that holds the box's current sandbox, by its record; the worker's own
// when the box has none recorded.
func (a *Snapshots) boxEngine(ctx context.Context, boxID cocoonbox.BoxID) (nodeEngine, error) {
	ref, err := a.Tokens.SandboxToken(ctx, string(boxID))
	switch {
	case cocoonbox.ErrorCode(err) == cocoonbox.ENotFound:
		return a.own(), nil
	case err != nil:
		return nodeEngine{}, classify(fmt.Errorf("read sandbox token: %w", err))
	}
	return nodeEngine{Client: engineAt(a.Client, ref.Addr), node: ref.Node, url: ref.Addr}, nil
}

// own is the worker's own engine.
func (a *Snapshots) own() nodeEngine {
	return nodeEngine{Client: a.Client, node: a.Node}
}

// registered is the deployment's node records, read once per restore; none when the worker
// cannot reach other engines or lists no nodes.
func (a *Snapshots) registered(ctx context.Context) ([]nodes.Node, error) {
	if _, ok := a.Client.(sandbox.NodeDialer); !ok || a.Nodes == nil {
		return nil, nil
	}
	all, err := a.Nodes(ctx)
	if err != nil {
		return nil, classify(fmt.Errorf("list engine nodes: %w", err))
	}
	return all, nil
}

// engines is every engine a restore's earlier try may have used: the worker's own first, then
// each registered node that is not lost.
func (a *Snapshots) engines(registered []nodes.Node) []nodeEngine {
	all := []nodeEngine{a.own()}
	for _, n := range registered {
		if n.ID != a.Node && n.State != nodes.Lost {
			all = append(all, a.at(n))
		}
	}
	return all
}

// at is the engine of registered node n.
func (a *Snapshots) at(n nodes.Node) nodeEngine {
	if n.ID == a.Node {
		return a.own()
	}
	return nodeEngine{Client: engineAt(a.Client, n.URL), node: n.ID, url: n.URL}
}

// placeRestore picks among the registered nodes the engine a restored box goes to: chosen, the
// node PlaceRestore named, while it still takes boxes; else by the rule a claim follows
// (placement); the worker's own when none is registered.
func (a *Snapshots) placeRestore(registered []nodes.Node, chosen string, req nodes.Request) (nodeEngine, error) {
	if len(registered) == 0 {
		return a.own(), nil
	}
	if chosen != "" {
		i := slices.IndexFunc(registered, func(n nodes.Node) bool { return n.ID == chosen })
		if i >= 0 && registered[i].State == nodes.Active {
			return a.at(registered[i]), nil
		}
	}
	n, refused := placement(registered, req, a.NodeDeadAfter, a.Node)
	if refused != nil {
		return nodeEngine{}, classify(fmt.Errorf("place the restored box: %w", refused))
	}
	if n.ID == "" {
		return a.own(), nil
	}
	return a.at(n), nil
}

// placement is where a new sandbox goes among the registered nodes all: the node nodes.Pick
// chooses; or, when the heartbeats (up to one beat old) say no node has room, the worker's own
// engine (the zero Node), whose admission is the authority and whose refusal names the limit.
// When the worker's own node is draining (an operator took it out of placement) or lost, no
// engine is asked then, and refused says why.
func placement(all []nodes.Node, req nodes.Request, deadAfter time.Duration, own string) (n nodes.Node, refused error) {
	n, err := nodes.Pick(all, req, time.Now(), cmp.Or(deadAfter, nodes.DefaultDeadAfter))
	if err == nil {
		return n, nil
	}
	if o := ownNode(all, own); o.State == nodes.Draining || o.State == nodes.Lost {
		return nodes.Node{}, err
	}
	return nodes.Node{}, nil
}

// on names eng's node for an error message: " on node ID", or nothing for an unregistered engine.
func (eng nodeEngine) on() string {
	if eng.node == "" {
		return ""
	}
	return " on node " + eng.node
}
