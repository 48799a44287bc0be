package workflows

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

// MoveInput asks the box to leave From, the engine node an operator drains.
type MoveInput struct {
	From string
}

// MoveResult says what the move did: Moved, a running box now on a sandbox elsewhere; or
// OnWake, a hibernated box that moves on its next wake.
type MoveResult struct {
	Status Status
	Moved  bool
	OnWake bool
}

func (w *box) validateMove(in MoveInput) error {
	if in.From == "" {
		return temporal.NewApplicationError("from: is required: the node the box leaves", activities.ErrTypeInvalidArgument)
	}
	return w.allowed(UpdateMove)
}

// move takes the box off node in.From. A running box is snapshotted and restored from that
// snapshot on the node placement picks (the draining one is never picked): its disk goes with it,
// its memory and processes do not, and its events say so. A hibernated box is left asleep, its
// memory image with it, until its next wake, which moves it then; a box without a sandbox has
// nothing on the node.
func (w *box) move(ctx workflow.Context, in MoveInput) (MoveResult, error) {
	var res MoveResult
	st, err := w.operate(ctx, byUser, func(ctx workflow.Context) error {
		if err := w.allowed(UpdateMove); err != nil {
			return err
		}
		switch {
		case w.st.SandboxID == "":
			return nil
		case w.st.State == cocoonbox.BoxStateHibernated:
			if w.st.MoveFrom != in.From {
				w.st.MoveFrom = in.From
				w.event(ctx, "move-on-wake", "node "+in.From+" is draining: the box moves to another node on its next wake")
			}
			res.OnWake = true
			return nil
		case w.st.State != cocoonbox.BoxStateRunning:
			return transitionError(UpdateMove, "a box that is "+string(w.st.State))
		}
		if err := w.moveLocked(ctx, in.From); err != nil {
			return err
		}
		res.Moved = true
		return nil
	})
	res.Status = st
	return res, err
}

// moveLocked moves the running box off node from: a snapshot, then a restore from it, placed; the
// old sandbox is released once the new one answers. A failure leaves the box running where it
// was, and says why.
func (w *box) moveLocked(ctx workflow.Context, from string) error {
	if err := w.awaitSeal(ctx); err != nil {
		return err
	}
	out, err := w.snapshotLocked(ctx)
	if err != nil {
		w.st.LastError = "move: " + reason(err)
		return err
	}
	w.setState(ctx, cocoonbox.BoxStateRestoring)
	var res activities.RestoreSnapshotResult
	if err := w.restoreFrom(ctx, out.Snapshot.ID, &res); err != nil {
		w.st.LastError = "move: " + reason(err)
		w.setState(ctx, cocoonbox.BoxStateRunning)
		return err
	}
	w.st.LastError, w.st.MoveFrom = "", ""
	w.event(ctx, "moved", fmt.Sprintf("off node %s onto a new sandbox from snapshot %s: its disk came with it, its memory and running processes did not",
		from, out.Snapshot.ID))
	w.setState(ctx, cocoonbox.BoxStateRunning)
	return nil
}

// moveOnWake moves a box that woke on the draining node it was asked to leave while asleep. The
// wake has succeeded whatever happens here: a failed move leaves the box running where it woke,
// and a later drain or wake tries again.
func (w *box) moveOnWake(ctx workflow.Context) {
	if err := w.moveLocked(ctx, w.st.MoveFrom); err != nil {
		w.event(ctx, "move-failed", reason(err))
	}
}

// Move asks box id to leave node from, and waits for its answer.
func Move(ctx context.Context, c client.Client, id cocoonbox.BoxID, from string) (MoveResult, error) {
	return Update[MoveResult](ctx, c, id, UpdateMove, MoveInput{From: from})
}

// DrainWorkflowID is the workflow ID of the drain of node id.
func DrainWorkflowID(node string) string { return "drain/" + node }

// DrainInput names the node whose boxes are moved off, and how many at once (0 is 1).
type DrainInput struct {
	Node     string
	Parallel int
}

// MaxDrainParallel bounds how many boxes a drain moves at once: each move is a snapshot on the
// draining node and a restore on another, and many at once would crowd both.
const MaxDrainParallel = 16

// DrainResult is what a drain did with each box the node held.
type DrainResult struct {
	Moved  []cocoonbox.BoxID // running boxes now on other nodes
	OnWake []cocoonbox.BoxID // hibernated boxes that move on their next wake
	Failed []DrainFailure
}

// DrainFailure is a box the drain could not move, and why.
type DrainFailure struct {
	Box    cocoonbox.BoxID
	Reason string
}

var drainActs *activities.Drain

// DrainWorkflow moves every box off a draining node, Parallel at a time (one by default) so
// the node and the others are not flooded with snapshots and restores: each box's own workflow
// does its move (MoveBox sends the update), so a drain killed midway is started again and skips
// the boxes already gone from the node. A box that fails to move stays where it is, named in the
// result, which lists the boxes in the node's order whatever order their moves ended in.
func DrainWorkflow(ctx workflow.Context, in DrainInput) (DrainResult, error) {
	var out DrainResult
	var boxes []activities.NodeBox
	if err := workflow.ExecuteActivity(storeOptions(ctx), drainActs.NodeBoxes, in.Node).Get(ctx, &boxes); err != nil {
		return out, err
	}
	moveCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 3 * time.Hour, // a snapshot and a restore of a large disk
		HeartbeatTimeout:    time.Minute,
		RetryPolicy:         retryPolicy(),
	})
	move := func(b activities.NodeBox) workflow.Future {
		return workflow.ExecuteActivity(moveCtx, drainActs.MoveBox, activities.MoveBoxInput{Box: b.Box, Node: in.Node})
	}
	// A window of Parallel moves (one by default): the next box starts as soon as any move
	// under way ends.
	window := min(max(in.Parallel, 1), MaxDrainParallel)
	results := make([]workflow.Future, len(boxes))
	sel := workflow.NewSelector(ctx)
	running := 0
	for i, b := range boxes {
		if running == window {
			sel.Select(ctx)
			running--
		}
		results[i] = move(b)
		sel.AddFuture(results[i], func(workflow.Future) {})
		running++
	}
	for range running {
		sel.Select(ctx)
	}
	for i, f := range results {
		var res activities.MoveBoxResult
		err := f.Get(ctx, &res)
		switch {
		case err != nil:
			out.Failed = append(out.Failed, DrainFailure{Box: boxes[i].Box, Reason: reason(err)})
		case res.Moved:
			out.Moved = append(out.Moved, boxes[i].Box)
		case res.OnWake:
			out.OnWake = append(out.OnWake, boxes[i].Box)
		}
	}
	return out, nil
}

// StartDrain starts the drain of node, moving parallel boxes at once, or finds the one already
// running (which keeps its own number); a drain that ended is started again (a box that failed
// to move, or came back, is tried anew).
func StartDrain(ctx context.Context, c client.Client, node string, parallel int) error {
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       DrainWorkflowID(node),
		TaskQueue:                TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}, DrainWorkflow, DrainInput{Node: node, Parallel: parallel})
	if err != nil {
		return DomainError(fmt.Errorf("start the drain of node %s: %w", node, err))
	}
	return nil
}

// DrainOutcome waits for the drain of node to end and answers what it did.
func DrainOutcome(ctx context.Context, c client.Client, node string) (DrainResult, error) {
	var out DrainResult
	if err := c.GetWorkflow(ctx, DrainWorkflowID(node), "").Get(ctx, &out); err != nil {
		return out, DomainError(fmt.Errorf("drain of node %s: %w", node, err))
	}
	return out, nil
}

// StopDrain cancels the drain of node, if one runs: the move under way finishes (it is the box's
// own operation), no further box is moved.
func StopDrain(ctx context.Context, c client.Client, node string) error {
	err := c.CancelWorkflow(ctx, DrainWorkflowID(node), "")
	if err != nil && !Missing(err) {
		if _, done := errors.AsType[*serviceerror.FailedPrecondition](err); !done {
			return DomainError(fmt.Errorf("stop the drain of node %s: %w", node, err))
		}
	}
	return nil
}
