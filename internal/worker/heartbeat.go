package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
)

// HeartbeatEvery is how often a node's worker refreshes the node's record.
const HeartbeatEvery = 10 * time.Second

// Heartbeat keeps the record of the engine node this worker runs beside current: every Every
// it reads the engine's /v1/info and stores the node's address, capacity, load and warm pools,
// registering the node on the first beat; on the way it marks lost every node (this one's
// peers) silent for longer than DeadAfter, so any live node notices a dead one.
type Heartbeat struct {
	Store     *store.Store
	Engine    sandbox.Client
	Node      nodes.Node // its ID and URL; the rest is read from the engine at each beat
	Every     time.Duration
	DeadAfter time.Duration
	Logger    *slog.Logger
	// TellLost tells box's workflow that the node holding its sandbox is lost (nil: nobody is
	// told, and the boxes learn at their next lease renewal).
	TellLost func(ctx context.Context, box cocoonbox.BoxID, sandboxID, node string) error
}

// StartHeartbeat runs h until the returned func, which waits for it to stop.
func StartHeartbeat(h *Heartbeat) (stop func()) {
	return runLoop(h.Run)
}

// Run beats until ctx ends. A beat that fails is logged and tried again at the next tick: a node
// whose engine does not answer stops refreshing its record, which is how its peers learn it is
// gone.
func (h *Heartbeat) Run(ctx context.Context) {
	every := h.Every
	if every <= 0 {
		every = HeartbeatEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := h.Beat(ctx); err != nil && ctx.Err() == nil {
			h.Logger.Warn("node heartbeat", "node", h.Node.ID, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Beat refreshes the node's record once and marks silent nodes lost.
func (h *Heartbeat) Beat(ctx context.Context) error {
	info, err := h.Engine.Info(ctx)
	if err != nil {
		return err
	}
	if _, err := h.Store.HeartbeatNode(ctx, FromInfo(h.Node, info)); err != nil {
		return err
	}
	dead := cmp.Or(h.DeadAfter, nodes.DefaultDeadAfter)
	lost, err := h.Store.MarkLostNodes(ctx, dead)
	if err != nil {
		return err
	}
	for _, n := range lost {
		h.Logger.Warn("engine node lost: no heartbeat", "node", n.ID, "dead_after", dead)
	}
	if h.TellLost == nil {
		return nil
	}
	return h.tellLost(ctx, lost)
}

// tellLost tells the boxes of the nodes just marked lost, so they bring their sandboxes back
// from their snapshots at once rather than at their next lease renewal. Only the beat that marked
// a node lost tells its boxes; a box it could not tell learns at its renewal.
func (h *Heartbeat) tellLost(ctx context.Context, lost []nodes.Node) error {
	var errs []error
	for _, n := range lost {
		boxes, err := h.Store.SandboxesOn(ctx, n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, b := range boxes {
			if err := h.TellLost(ctx, cocoonbox.BoxID(b.BoxID), b.SandboxID, n.ID); err != nil {
				errs = append(errs, fmt.Errorf("tell box %s its node %s is lost: %w", b.BoxID, n.ID, err))
			}
		}
	}
	return errors.Join(errs...)
}

// FromInfo is node n with the capacity, load and warm pools its engine's /v1/info reports. An
// engine that reports no capacity (upstream sandboxd) is recorded without one.
func FromInfo(n nodes.Node, info sandbox.Info) nodes.Node {
	n.Boxes, n.Hibernated = info.Claimed, info.Hibernated
	if c := info.Capacity; c != nil {
		n.MemoryMiB, n.CommittedMiB, n.MaxBoxes = c.MemoryMiB, c.CommittedMiB, c.MaxSandboxes
	}
	n.Warm = map[string]int{}
	for _, p := range info.Pools {
		n.Warm[nodes.PoolKey(p.Key.Template, cocoonbox.Size(p.Key.Size), p.Key.Net)] = p.Warm
	}
	return n
}
