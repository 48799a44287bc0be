package engine

import (
	"context"
	"errors"
	"net/http"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// A box on the egress lane has a NIC (gVisor's netstack in a namespace of its own) and an egress
// policy the runtime enforces outside it: internet by default, or an allow-list. Unlike
// upstream's egress lane, it hibernates and wakes with its address and policy (a local-engine
// extension: the claim's egress field and PUT /v1/sandboxes/{id}/egress).

// networked reports whether the runtime can give boxes a NIC.
func (e *Engine) networked() bool {
	n, ok := e.rt.(runtime.Networker)
	return ok && n.Networked()
}

// lanes are the network lanes this engine can claim, for /v1/info.
func (e *Engine) lanes() []string {
	if e.networked() {
		return []string{sandbox.NetNone, sandbox.NetEgress}
	}
	return []string{sandbox.NetNone}
}

// egressOf is the policy a claim of key asks for: internet when it names none. A policy on the
// none lane is refused: such a box has no NIC for it to apply to.
func egressOf(key sandbox.PoolKey, p *sandbox.EgressPolicy) (runtime.Egress, error) {
	if p == nil {
		return runtime.Egress{Policy: runtime.EgressInternet}, nil
	}
	if key.Net != sandbox.NetEgress {
		return runtime.Egress{}, invalid("egress: only a box on the %q lane has a network to apply a policy to", sandbox.NetEgress)
	}
	eg := runtime.Egress{Policy: p.Policy, Allow: p.Allow}
	if eg.Policy == "" {
		eg.Policy = runtime.EgressInternet
	}
	if err := eg.Validate(); err != nil {
		return runtime.Egress{}, invalid("%v", err)
	}
	return eg, nil
}

// setEgress applies eg to b's NIC.
func (e *Engine) setEgress(ctx context.Context, b *box, eg runtime.Egress) error {
	r, gone := b.snapshot()
	if gone {
		return errUnknownSandbox
	}
	if r.Key.Net != sandbox.NetEgress {
		return newError(kindConflict, "the sandbox is on the %q lane: it has no network for a policy", r.Key.Net)
	}
	n, ok := e.rt.(runtime.Networker)
	if !ok {
		return newError(kindConflict, "this engine's runtime gives boxes no network")
	}
	sctx, cancel := lifecycleCtx(ctx)
	defer cancel()
	if err := n.SetEgress(sctx, r.ID, eg); err != nil {
		if errors.Is(err, runtime.ErrNotFound) {
			return errUnknownSandbox
		}
		return e.runtimeError(sctx, b, "set egress", err)
	}
	return nil
}

// handleSetEgress is PUT /v1/sandboxes/{id}/egress: the box's egress policy from now on.
func (e *Engine) handleSetEgress(w http.ResponseWriter, r *http.Request) error {
	b, err := e.authorizeBox(r, true)
	if err != nil {
		return err
	}
	var req sandbox.EgressPolicy
	if err := decode(w, r, &req, bodyRequired); err != nil {
		return err
	}
	rec, gone := b.snapshot()
	if gone {
		return errUnknownSandbox
	}
	eg, err := egressOf(rec.Key, &req)
	if err != nil {
		return err
	}
	if err := e.setEgress(r.Context(), b, eg); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
