package activities

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
)

// Drain holds the activities of a node's drain (workflows.DrainWorkflow): which boxes the node
// holds, and moving one of them through its own workflow.
type Drain struct {
	// Boxes lists the live boxes whose sandbox node holds.
	Boxes func(ctx context.Context, node string) ([]cocoonbox.BoxID, error)
	// Move asks box's workflow to leave node and waits for its answer (an update cannot be sent
	// from a workflow); moved says the box now runs elsewhere, onWake that it sleeps and moves on
	// its next wake.
	Move func(ctx context.Context, box cocoonbox.BoxID, node string) (moved, onWake bool, err error)
	// Holds reports whether node still holds box's sandbox, so a retried move of a box that has
	// left already is not sent again.
	Holds func(ctx context.Context, box cocoonbox.BoxID, node string) (bool, error)
	// Placeable says why no other node could take box now (a no_capacity error naming what each
	// lacks), or nil when one could: a box that has nowhere to go is not snapshotted for nothing.
	Placeable func(ctx context.Context, box cocoonbox.BoxID) error
}

// NodeBox is a box a drained node holds.
type NodeBox struct {
	Box cocoonbox.BoxID
}

// NodeBoxes lists the boxes whose sandbox node holds.
func (a *Drain) NodeBoxes(ctx context.Context, node string) ([]NodeBox, error) {
	ids, err := a.Boxes(ctx, node)
	if err != nil {
		return nil, classify(fmt.Errorf("list the boxes on node %s: %w", node, err))
	}
	out := make([]NodeBox, len(ids))
	for i, id := range ids {
		out[i] = NodeBox{Box: id}
	}
	return out, nil
}

// MoveBoxInput names a box to move off node Node.
type MoveBoxInput struct {
	Box  cocoonbox.BoxID
	Node string
}

// MoveBoxResult is what the box's workflow did: Moved, or OnWake; neither when the box had left
// the node already (or was deleted meanwhile).
type MoveBoxResult struct {
	Moved  bool
	OnWake bool
}

// MoveBox moves one box off a draining node through its workflow, heartbeating while the
// workflow snapshots and restores it.
func (a *Drain) MoveBox(ctx context.Context, in MoveBoxInput) (MoveBoxResult, error) {
	if err := in.Box.Validate(); err != nil {
		return MoveBoxResult{}, classify(err)
	}
	holds, err := a.Holds(ctx, in.Box, in.Node)
	if err != nil {
		return MoveBoxResult{}, classify(fmt.Errorf("read box %s: %w", in.Box, err))
	}
	if !holds {
		return MoveBoxResult{}, nil
	}
	if err := a.Placeable(ctx, in.Box); cocoonbox.ErrorCode(err) == cocoonbox.ENoCapacity {
		// Said once and not retried: the drain reports the box as staying, and draining again
		// retries it once there is room.
		return MoveBoxResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeNoCapacity, err)
	} else if err != nil {
		return MoveBoxResult{}, classify(fmt.Errorf("place box %s: %w", in.Box, err))
	}
	return whileHeartbeating(ctx, func(ctx context.Context) (MoveBoxResult, error) {
		moved, onWake, err := a.Move(ctx, in.Box, in.Node)
		if cocoonbox.ErrorCode(err) == cocoonbox.ENotFound {
			return MoveBoxResult{}, nil // deleted meanwhile: nothing left to move
		}
		if err != nil {
			return MoveBoxResult{}, classify(err) // a refusal (a failed box) is a conflict, not retried
		}
		return MoveBoxResult{Moved: moved, OnWake: onWake}, nil
	})
}
