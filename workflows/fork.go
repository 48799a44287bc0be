package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

// Forks: the source box's workflow takes a checkpoint of the box with its memory (fork), the
// front door starts one box workflow per fork with a ForkOrigin, and each of those claims its
// sandbox from the checkpoint (claimFork) and then tells the source (SignalForkClaimed). The
// source keeps the checkpoint until every fork has claimed from it or ForkCheckpointTTL has
// passed, so a front door that dies between the two steps leaves nothing behind for long.

// ForkCheckpointTTL is how long the parent keeps a fork's checkpoint for its forks.
const ForkCheckpointTTL = activities.ForkCheckpointTTL

// fork checkpoints the box, running or hibernated, with its memory.
func (w *box) fork(ctx workflow.Context, in ForkInput) (ForkResult, error) {
	var res ForkResult
	st, err := w.operate(ctx, byUser, func(ctx workflow.Context) error {
		if err := w.allowed(UpdateFork); err != nil {
			return err
		}
		if s := w.st.State; s != cocoonbox.BoxStateRunning && s != cocoonbox.BoxStateHibernated {
			return transitionError(UpdateFork, "a box that is "+string(s))
		}
		if w.st.SandboxID == "" {
			return transitionError(UpdateFork, "a box whose sandbox is gone (wake it first)")
		}
		var out activities.ForkCheckpointResult
		err := workflow.ExecuteActivity(sandboxOptions(ctx, 5*time.Minute), snapActs.CheckpointForFork, activities.ForkCheckpointInput{
			BoxID: w.in.BoxID, SandboxID: w.st.SandboxID, Name: ForkCheckpointName(in.ForkID),
		}).Get(ctx, &out)
		if err != nil {
			return err
		}
		now := workflow.Now(ctx)
		w.st.Forks = append(w.st.Forks, ForkCheckpoint{ID: out.ID, Node: out.Node, Pending: in.Count, Until: now.Add(ForkCheckpointTTL)})
		detail := fmt.Sprintf("%d fork(s) from checkpoint %s", in.Count, out.ID)
		if in.By != "" {
			detail += " for " + in.By
		}
		if out.Paused > 0 {
			detail += fmt.Sprintf(", the box paused %s", out.Paused.Round(time.Millisecond))
		}
		w.event(ctx, "forked", detail)
		res = ForkResult{CheckpointID: out.ID, Node: out.Node, At: now, Paused: out.Paused}
		return nil
	})
	res.Status = st
	return res, err
}

func (w *box) validateFork(in ForkInput) error {
	if in.Count < 1 || in.Count > MaxForks {
		return temporal.NewApplicationError(fmt.Sprintf("count: must be from 1 to %d, got %d", MaxForks, in.Count), activities.ErrTypeInvalidArgument)
	}
	if in.ForkID == "" {
		return temporal.NewApplicationError("fork_id: is required", activities.ErrTypeInvalidArgument)
	}
	return w.allowed(UpdateFork)
}

// ForkCheckpointName names the checkpoint of fork id on the engine, so a retried checkpoint
// activity finds the one an earlier try made.
func ForkCheckpointName(id string) string { return "fork:" + id }

// forkClaimed counts a fork's claim from checkpoint s; once none is pending, the checkpoint is
// due to go at the next timer.
func (w *box) forkClaimed(ctx workflow.Context, s ForkClaimedSignal) {
	for i := range w.st.Forks {
		if f := &w.st.Forks[i]; f.ID == s.CheckpointID {
			if f.Pending--; f.Pending <= 0 {
				f.Until = workflow.Now(ctx)
			}
		}
	}
}

// forksDue is when the next fork checkpoint is due to go; zero when none is kept.
func (w *box) forksDue() time.Time {
	var due time.Time
	for _, f := range w.st.Forks {
		if due.IsZero() || f.Until.Before(due) {
			due = f.Until
		}
	}
	return due
}

// dropForks deletes the fork checkpoints that are due. One that cannot be deleted now is tried
// again a minute later.
func (w *box) dropForks(ctx workflow.Context) {
	now := workflow.Now(ctx)
	w.st.Forks = slices.DeleteFunc(w.st.Forks, func(f ForkCheckpoint) bool {
		if now.Before(f.Until) {
			return false
		}
		err := workflow.ExecuteActivity(sandboxOptions(ctx, time.Minute), snapActs.DropForkCheckpoint,
			activities.DropForkCheckpointInput{CheckpointID: f.ID, Node: f.Node}).Get(ctx, nil)
		if err != nil {
			workflow.GetLogger(ctx).Warn("delete a fork checkpoint", "checkpoint", f.ID, "error", err)
		}
		return err == nil
	})
	for i := range w.st.Forks {
		if f := &w.st.Forks[i]; !now.Before(f.Until) {
			f.Until = now.Add(time.Minute)
		}
	}
}

// claimFromCheckpoint claims the box's next sandbox (claim attempt attempt) from box from's
// checkpoint with memory, then tells from that the checkpoint is no longer needed for it,
// whatever the claim's outcome (best effort: from may be gone, and its checkpoint expires).
func (w *box) claimFromCheckpoint(ctx workflow.Context, attempt int, from cocoonbox.BoxID, checkpointID, node string) (activities.ClaimResult, error) {
	res, err := w.claimWithMemory(ctx, attempt, checkpointID, node, retryPolicy())
	w.doneWith(ctx, from, checkpointID)
	return res, err
}

// claimWithMemory claims the box's next sandbox from a checkpoint with memory, retrying as
// retry says.
func (w *box) claimWithMemory(ctx workflow.Context, attempt int, checkpointID, node string, retry *temporal.RetryPolicy) (activities.ClaimResult, error) {
	var res activities.ClaimResult
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		HeartbeatTimeout:    sandboxHeartbeatTimeout,
		RetryPolicy:         retry,
	}), snapActs.ClaimFork, activities.ClaimForkInput{
		BoxID: w.in.BoxID, Attempt: attempt, CheckpointID: checkpointID, Node: node,
		TTL: w.in.Policy.LeaseTTL, Network: w.in.Policy.Network, Name: w.in.Name,
	}).Get(ctx, &res)
	return res, err
}

// doneWith tells box from that this box no longer needs its checkpoint (best effort).
func (w *box) doneWith(ctx workflow.Context, from cocoonbox.BoxID, checkpointID string) {
	_ = workflow.SignalExternalWorkflow(ctx, BoxWorkflowID(from), "", SignalForkClaimed,
		ForkClaimedSignal{CheckpointID: checkpointID}).Get(ctx, nil)
}

// versionForkElsewhere marks a fork's going to a node with room through a snapshot of its disk
// when its parent's node has none; before it, the claim there was tried again until it failed.
const versionForkElsewhere = "fork-elsewhere"

// claimFork claims the fork's first sandbox from its parent's checkpoint; the activity also
// waits until it answers with the box's credential and gives it an identity of its own. When
// the parent's node has no room for it, the fork gets its parent's disk on another node
// instead (forkElsewhere), without the memory, and says so.
func (w *box) claimFork(ctx workflow.Context) error {
	from := w.in.Fork
	attempt := w.st.Attempt + 1
	retry := retryPolicy()
	elsewhere := w.version(ctx, versionForkElsewhere, 1) >= 1
	if elsewhere {
		retry.NonRetryableErrorTypes = append(slices.Clone(retry.NonRetryableErrorTypes), activities.ErrTypeNoCapacity)
	}
	res, err := w.claimWithMemory(ctx, attempt, from.CheckpointID, from.Node, retry)
	if elsewhere && errorType(err) == activities.ErrTypeNoCapacity {
		err = w.forkElsewhere(ctx, reason(err))
		w.doneWith(ctx, from.Parent, from.CheckpointID)
		return err
	}
	w.doneWith(ctx, from.Parent, from.CheckpointID)
	if err != nil {
		return err
	}
	w.st.Attempt = attempt
	w.st.SandboxID, w.st.Node = res.SandboxID, res.Node
	w.st.Start = "fork"
	w.leased(workflow.Now(ctx), res.Deadline)
	w.event(ctx, "forked_from", fmt.Sprintf("%s at %s", from.Parent, from.At.UTC().Format(time.RFC3339)))
	return nil
}

// forkElsewhere gives a fork whose parent's node had no room for it (why) its parent's disk on
// a node that has: the disk of the fork's checkpoint becomes the fork's first snapshot,
// uploaded from the parent's node and verified, which is restored where placement puts it, with
// the fork's own identity. The memory stays behind: its programs start afresh, as after a boot.
func (w *box) forkElsewhere(ctx workflow.Context, why string) error {
	from := w.in.Fork
	id, err := newSnapshotID(ctx)
	if err != nil {
		return err
	}
	var snap cocoonbox.Snapshot
	err = workflow.ExecuteActivity(storeOptions(ctx), snapActs.BeginSnapshot,
		activities.BeginSnapshotInput{BoxID: w.in.BoxID, SnapshotID: id}).Get(ctx, &snap)
	var up activities.UploadSnapshotResult
	if err == nil {
		in := activities.UploadForkDiskInput{BoxID: w.in.BoxID, SnapshotID: id, CheckpointID: from.CheckpointID, Node: from.Node, At: from.At}
		taken := false
		if from.Node != "" {
			taken, err = onNodeQueue(streamOptions(ctx), from.Node, snapActs.UploadForkDisk, in, &up)
		}
		if !taken {
			err = workflow.ExecuteActivity(streamOptions(ctx), snapActs.UploadForkDisk, in).Get(ctx, &up)
		}
	}
	if err == nil {
		err = workflow.ExecuteActivity(storeOptions(ctx), snapActs.CompleteSnapshot,
			activities.CompleteSnapshotInput{SnapshotID: id, UploadSnapshotResult: up}).Get(ctx, &snap)
	}
	if err != nil {
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		if ferr := workflow.ExecuteActivity(cleanupOptions(dctx), snapActs.FailSnapshot,
			activities.SnapshotRef{BoxID: w.in.BoxID, SnapshotID: id}).Get(dctx, nil); ferr != nil {
			workflow.GetLogger(ctx).Error("clean up the fork's snapshot", "snapshot", id, "error", ferr)
		}
		return err
	}
	var res activities.RestoreSnapshotResult
	if err := w.restoreAs(ctx, id, true, &res); err != nil {
		return err
	}
	w.st.Start = "fork"
	w.event(ctx, "forked_without_memory", fmt.Sprintf("from %s at %s: its node had no room (%s), so this fork has its disk "+
		"(snapshot %s) on node %s, and its programs started afresh", from.Parent, from.At.UTC().Format(time.RFC3339), why, id, res.Node))
	return nil
}

// adopt replaces the box's state with box From's, as a checkpoint with memory of it: the
// accepted attempt of a best-of-N run. The box's sandbox is swapped for one claimed from the
// checkpoint (the old one released once the new one answers); a failed adopt leaves the box as
// it was.
func (w *box) adopt(ctx workflow.Context, in AdoptInput) (Status, error) {
	return w.operate(ctx, byUser, func(ctx workflow.Context) error {
		if err := w.allowed(UpdateAdopt); err != nil {
			return err
		}
		if err := w.awaitSeal(ctx); err != nil {
			return err
		}
		before := w.st.State
		w.setState(ctx, cocoonbox.BoxStateRestoring)
		attempt := w.st.Attempt + 1
		res, err := w.claimFromCheckpoint(ctx, attempt, in.From, in.CheckpointID, in.Node)
		if err != nil {
			w.st.LastError = "adopt: " + reason(err)
			w.setState(ctx, before)
			return err
		}
		w.st.Attempt = attempt
		old := w.st.SandboxID
		w.st.SandboxID, w.st.Node = res.SandboxID, res.Node
		w.st.MoveFrom = ""
		w.leased(workflow.Now(ctx), res.Deadline)
		w.event(ctx, "adopted", "the state of "+string(in.From))
		if old != "" && old != res.SandboxID {
			w.releaseReplaced(ctx, old)
		}
		w.st.LastError = ""
		w.setState(ctx, cocoonbox.BoxStateRunning)
		return nil
	})
}

func (w *box) validateAdopt(in AdoptInput) error {
	if in.CheckpointID == "" {
		return temporal.NewApplicationError("checkpoint_id: is required", activities.ErrTypeInvalidArgument)
	}
	if err := in.From.Validate(); err != nil {
		return temporal.NewApplicationError(err.Error(), activities.ErrTypeInvalidArgument)
	}
	return w.allowed(UpdateAdopt)
}
