package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// ForkCheckpointInput names the box to checkpoint with its memory, and the checkpoint's name
// (workflows.ForkCheckpointName).
type ForkCheckpointInput struct {
	BoxID     cocoonbox.BoxID
	SandboxID string
	Name      string
}

// ForkCheckpointResult is the checkpoint a fork claims from, on the engine of node Node.
type ForkCheckpointResult struct {
	ID     string
	Node   string        `json:",omitempty"`
	Paused time.Duration // how long the checkpoint took; a running box is paused for it
}

// CheckpointForFork checkpoints the box's sandbox with its memory on the engine that holds it.
// A try whose answer was lost left a checkpoint under the same name, which a retry returns.
func (a *Snapshots) CheckpointForFork(ctx context.Context, in ForkCheckpointInput) (ForkCheckpointResult, error) {
	if err := in.BoxID.Validate(); err != nil {
		return ForkCheckpointResult{}, classify(err)
	}
	ref, err := sandboxRef(ctx, a.Tokens, in.BoxID, in.SandboxID)
	if err != nil {
		return ForkCheckpointResult{}, err
	}
	eng := nodeEngine{Client: engineAt(a.Client, ref.Addr), node: ref.Node, url: ref.Addr}
	if eng.node == "" {
		eng.node = a.Node
	}
	if ck, ok, err := checkpointNamed(ctx, eng, in.Name); err != nil || ok {
		return ForkCheckpointResult{ID: ck.ID, Node: eng.node}, err
	}
	mc, ok := eng.Client.(sandbox.MemoryCheckpointer)
	if !ok {
		return ForkCheckpointResult{}, classify(cocoonbox.Errorf(cocoonbox.EInvalid, "this deployment's engine cannot checkpoint a box with its memory"))
	}
	start := time.Now()
	ck, err := whileHeartbeating(ctx, func(ctx context.Context) (sandbox.Checkpoint, error) {
		return mc.CheckpointMemory(ctx, ref, in.Name)
	})
	took := time.Since(start)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return ForkCheckpointResult{}, gone(fmt.Errorf("checkpoint sandbox %s: %w", ref.ID, err))
	case err != nil:
		return ForkCheckpointResult{}, classify(fmt.Errorf("checkpoint sandbox %s with its memory: %w", ref.ID, err))
	case !ck.Memory:
		dropCheckpoint(ctx, eng, ck.ID)
		return ForkCheckpointResult{}, classify(cocoonbox.Errorf(cocoonbox.EInvalid, "the engine checkpointed the box without its memory; it cannot fork a running desktop"))
	}
	return ForkCheckpointResult{ID: ck.ID, Node: eng.node, Paused: took}, nil
}

// ClaimForkInput is a fork's claim from its parent's checkpoint.
type ClaimForkInput struct {
	BoxID        cocoonbox.BoxID
	Attempt      int
	CheckpointID string
	Node         string // the node whose engine holds the checkpoint; "" for the worker's own
	TTL          time.Duration
	Network      cocoonbox.Network
	// Name is the box's name, from which its hostname comes (see Hostname).
	Name string `json:",omitempty"`
}

// ClaimFork claims the fork's sandbox from the checkpoint (adopting one an earlier try claimed
// under the same claim_ref), waits until it answers with the fork's own agent credential, gives
// it an identity of its own (cocoonbox-init reseed: a new machine ID, SSH host keys and its
// hostname) and only then records its token as the box's.
func (a *Snapshots) ClaimFork(ctx context.Context, in ClaimForkInput) (ClaimResult, error) {
	if err := in.BoxID.Validate(); err != nil {
		return ClaimResult{}, classify(err)
	}
	if in.Attempt < 1 {
		return ClaimResult{}, classify(cocoonbox.Invalid("attempt", "must be at least 1"))
	}
	eng, err := a.nodeEngine(ctx, in.Node)
	if err != nil {
		return ClaimResult{}, err
	}
	ref := ClaimRef(in.BoxID, in.Attempt)
	got, adopted, err := adoptByRef(ctx, eng, ref)
	if err != nil {
		return ClaimResult{}, err
	}
	if !adopted {
		got, err = whileHeartbeating(ctx, func(ctx context.Context) (sandbox.Claimed, error) {
			return eng.ClaimFromCheckpoint(ctx, in.CheckpointID, in.TTL, ref)
		})
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			return ClaimResult{}, ClaimForkGone(in.CheckpointID)
		case err != nil:
			return ClaimResult{}, classify(fmt.Errorf("claim fork from checkpoint %s: %w", in.CheckpointID, err))
		}
		if err := applyEgress(ctx, eng.Client, got.SandboxRef, in.Network); err != nil {
			relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = eng.Release(relCtx, got.SandboxRef) // a box never runs on a wider policy than its own
			return ClaimResult{}, classify(fmt.Errorf("claim fork: %w", err))
		}
	}
	readyCtx, cancel := context.WithTimeout(ctx, restoreReadyTimeout)
	err = readyWithCredential(readyCtx, eng.Client, got.SandboxRef, a.PollInterval, in.BoxID, a.Credentials)
	if err == nil {
		err = reseed(readyCtx, eng.Client, got.SandboxRef, Hostname(in.Name, in.BoxID))
	}
	cancel()
	if err != nil {
		return ClaimResult{}, classify(fmt.Errorf("fork sandbox %s: %w", got.ID, err))
	}
	got = onNode(got, eng.node, eng.url)
	if err := a.Tokens.PutSandboxToken(ctx, string(in.BoxID), got.SandboxRef); err != nil {
		return ClaimResult{}, classify(fmt.Errorf("store sandbox token: %w", err))
	}
	return ClaimResult{SandboxID: got.ID, Deadline: got.Deadline, Adopted: adopted, Node: got.Node}, nil
}

// ClaimForkGone is ClaimFork's error when the checkpoint is gone: the fork fails, saying why.
func ClaimForkGone(checkpointID string) error {
	return classify(cocoonbox.Errorf(cocoonbox.ENotFound,
		"the fork's checkpoint %s is gone (a fork's checkpoint is kept %g minutes for its forks to claim from)", checkpointID, ForkCheckpointTTL.Minutes()))
}

// ForkCheckpointTTL is how long a fork's checkpoint waits for its forks to claim from it: a
// fork whose create has not claimed by then fails, saying so.
const ForkCheckpointTTL = 10 * time.Minute

// reseed runs cocoonbox-init reseed in a fork, so it does not share its parent's machine ID,
// SSH host keys or hostname.
func reseed(ctx context.Context, c sandbox.Client, ref sandbox.SandboxRef, hostname string) error {
	res, err := c.Exec(ctx, ref, sandbox.ExecRequest{Argv: []string{boxproto.InitPath, "reseed", hostname}, TimeoutSeconds: 60})
	switch {
	case err != nil:
		return fmt.Errorf("reseed: %w", err)
	case res.ExitCode != 0:
		return fmt.Errorf("reseed: exit %d: %.200s", res.ExitCode, strings.TrimSpace(res.Stderr))
	case res.Stderr != "":
		activity.GetLogger(ctx).Warn("reseed a fork", "sandbox", ref.ID, "stderr", fmt.Sprintf("%.200s", strings.TrimSpace(res.Stderr)))
	}
	return nil
}

// Hostname is the hostname of a box named name: the name in lowercase with each run of
// characters a DNS label cannot hold turned into one hyphen, at most 63 of them; "box-" and
// the end of its ID when nothing is left.
func Hostname(name string, id cocoonbox.BoxID) string {
	var b strings.Builder
	hyphen := false
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if hyphen && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			hyphen = false
			continue
		}
		hyphen = true
	}
	h := b.String()
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-")
	}
	if h == "" {
		s := string(id)
		h = "box-" + s[max(0, len(s)-8):]
	}
	return h
}

// DropForkCheckpointInput names a fork checkpoint no fork needs any more.
type DropForkCheckpointInput struct {
	CheckpointID string
	Node         string
}

// DropForkCheckpoint deletes a fork's checkpoint; one already gone is done.
func (a *Snapshots) DropForkCheckpoint(ctx context.Context, in DropForkCheckpointInput) error {
	eng, err := a.nodeEngine(ctx, in.Node)
	if err != nil {
		return err
	}
	if err := eng.DeleteCheckpoint(ctx, in.CheckpointID); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return classify(fmt.Errorf("delete checkpoint %s: %w", in.CheckpointID, err))
	}
	return nil
}

// nodeEngine is the engine of registered node id: the worker's own for "" or its own node.
func (a *Snapshots) nodeEngine(ctx context.Context, id string) (nodeEngine, error) {
	if id == "" || id == a.Node {
		return a.own(), nil
	}
	registered, err := a.registered(ctx)
	if err != nil {
		return nodeEngine{}, err
	}
	for _, n := range registered {
		if n.ID == id {
			return a.at(n), nil
		}
	}
	return nodeEngine{}, classify(cocoonbox.Errorf(cocoonbox.EUnavailable, "engine node %s is not registered", id))
}
