package engine

import (
	"cmp"
	"net/http"
	"slices"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// handleInfo reports the pools, the claim counts and — beyond upstream's fields — which runtime
// runs the boxes and what it can really do. A runtime without memory hibernate says so here;
// the engine never claims an ability the runtime lacks.
func (e *Engine) handleInfo(w http.ResponseWriter, _ *http.Request, _ caller) error {
	writeJSON(w, http.StatusOK, e.info())
	return nil
}

func (e *Engine) info() sandbox.Info {
	caps := e.rt.Capabilities()
	_, forks := e.rt.(runtime.Forker)
	_, differs := e.rt.(runtime.DiffSnapshotter)
	_, fills := e.rt.(runtime.DiskFiller)
	out := sandbox.Info{
		Pools:         e.poolInfos(),
		AdvertiseAddr: e.ownerAddr,
		Runtime:       e.rt.Name(),
		Capabilities: &sandbox.Capabilities{
			MemoryHibernate:  caps.MemoryHibernate,
			CheckpointMemory: forks, // asked for by memory: true; a checkpoint without it is the disk alone
			AgentRelay:       false, // /agent answers 501; cocoonbox reaches its agent through the ports relay
			Lanes:            e.lanes(),
			Isolation:        caps.Isolation,
			DiskExport:       !e.noExport,            // GET /v1/checkpoints/{id}/disk
			IncrementalDisk:  !e.noExport,            // POST /v1/checkpoints/{id}/disk with a base index
			CheckpointSince:  differs && !e.noExport, // POST /v1/sandboxes/{id}/checkpoint/since
			ImportClaim:      fills && !e.noExport,   // POST /v1/sandboxes/import
		},
	}
	for _, b := range e.claimed() {
		r, _ := b.snapshot()
		out.Claimed++
		if r.Hibernated {
			out.Hibernated++
		}
	}
	e.mu.Lock()
	if err := e.admitLocked(sandbox.PoolKey{Size: string(cocoonbox.SizeSmall)}); err != nil {
		out.AtCapacity = true
		out.AtCapacityReason = err.Error()
	}
	out.Capacity = &sandbox.Capacity{MemoryMiB: e.memory.mb, CommittedMiB: e.committedLocked(), MaxSandboxes: e.maxBoxes}
	e.mu.Unlock()
	return out
}

func (e *Engine) poolInfos() []sandbox.PoolInfo {
	e.mu.Lock()
	out := make([]sandbox.PoolInfo, 0, len(e.pools))
	for _, p := range e.pools {
		out = append(out, sandbox.PoolInfo{Key: p.key, Warm: len(p.ready), Refilling: p.refilling, Target: p.spec.Warm})
	}
	e.mu.Unlock()
	slices.SortFunc(out, func(a, b sandbox.PoolInfo) int {
		return cmp.Or(cmp.Compare(a.Key.Template, b.Key.Template), cmp.Compare(a.Key.Net, b.Key.Net), cmp.Compare(a.Key.Size, b.Key.Size))
	})
	return out
}
