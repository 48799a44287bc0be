package activities

import (
	"context"
	"fmt"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// A box's network policy (cocoonbox.Network) picks its sandbox's lane: none has no NIC, internet
// and allow are the egress lane with that egress policy, which the engine enforces outside the
// box.

// lane is the engine's network lane for policy n.
func lane(n cocoonbox.Network) string {
	if n.Policy == "" || n.Policy == cocoonbox.NetworkNone {
		return sandbox.NetNone
	}
	return sandbox.NetEgress
}

// egressPolicy is what a claim on the egress lane asks for; nil for the none lane.
func egressPolicy(n cocoonbox.Network) *sandbox.EgressPolicy {
	if lane(n) == sandbox.NetNone {
		return nil
	}
	return &sandbox.EgressPolicy{Policy: n.Policy, Allow: n.Allow}
}

// applyEgress gives a sandbox claimed from a checkpoint (which starts on the internet policy)
// the box's own policy; nothing to do for internet or none.
func applyEgress(ctx context.Context, c sandbox.Client, ref sandbox.SandboxRef, n cocoonbox.Network) error {
	if n.Policy != cocoonbox.NetworkAllow {
		return nil
	}
	setter, ok := c.(sandbox.EgressSetter)
	if !ok {
		return cocoonbox.Errorf(cocoonbox.EUnimplemented, "the sandbox engine cannot set a box's egress policy, so it cannot restore a box with an allow-list")
	}
	if err := setter.SetEgress(ctx, ref, *egressPolicy(n)); err != nil {
		return fmt.Errorf("set egress policy: %w", err)
	}
	return nil
}

// SetEgressInput is a networked box's new egress policy, for its current sandbox.
type SetEgressInput struct {
	BoxID     cocoonbox.BoxID
	SandboxID string
	Network   cocoonbox.Network
}

// SetEgress gives the box's sandbox a new egress policy at once (it keeps it across hibernate
// and wake). A sandbox the engine no longer has is SandboxGone: the next one is claimed with the
// policy anyway.
func (a *Sandbox) SetEgress(ctx context.Context, in SetEgressInput) error {
	if err := in.Network.Validate(); err != nil {
		return classify(err)
	}
	if lane(in.Network) != sandbox.NetEgress {
		return classify(cocoonbox.Invalid("network", "a box without a NIC has no egress policy to set"))
	}
	setter, ok := a.Client.(sandbox.EgressSetter)
	if !ok {
		return classify(cocoonbox.Errorf(cocoonbox.EUnimplemented, "the sandbox engine cannot change a box's egress policy"))
	}
	return a.onSandbox(ctx, SandboxInput{BoxID: in.BoxID, SandboxID: in.SandboxID}, "set egress of", func(ctx context.Context, ref sandbox.SandboxRef) error {
		return setter.SetEgress(ctx, ref, *egressPolicy(in.Network))
	})
}
