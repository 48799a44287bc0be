package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

var snapActs *activities.Snapshots

// SnapshotWorkflow takes one snapshot of a box's sandbox (ID SnapshotWorkflowID), as a child of
// the box workflow: it records the snapshot as uploading, streams the disk to object storage,
// verifies it, records it complete and applies retention. Nothing is complete before it is
// verified; a snapshot that cannot be finished is cleaned up and marked failed, and earlier
// snapshots are never touched by a failure.
func SnapshotWorkflow(ctx workflow.Context, in SnapshotWorkflowInput) (SnapshotWorkflowResult, error) {
	var out SnapshotWorkflowResult
	if err := in.BoxID.Validate(); err != nil {
		return out, temporal.NewNonRetryableApplicationError(err.Error(), activities.ErrTypeInvalidArgument, err)
	}
	if err := cocoonbox.ValidateSnapshotID("snapshot_id", in.SnapshotID); err != nil {
		return out, temporal.NewNonRetryableApplicationError(err.Error(), activities.ErrTypeInvalidArgument, err)
	}
	ref := activities.SnapshotRef{BoxID: in.BoxID, SnapshotID: in.SnapshotID}
	err := workflow.ExecuteActivity(storeOptions(ctx), snapActs.BeginSnapshot, activities.BeginSnapshotInput{
		BoxID: in.BoxID, SnapshotID: in.SnapshotID,
	}).Get(ctx, &out.Snapshot)
	if err != nil {
		return out, err
	}
	var up activities.UploadSnapshotResult
	err = upload(ctx, in, &up)
	if err == nil {
		err = workflow.ExecuteActivity(storeOptions(ctx), snapActs.CompleteSnapshot, activities.CompleteSnapshotInput{
			SnapshotID: in.SnapshotID, UploadSnapshotResult: up,
		}).Get(ctx, &out.Snapshot)
	}
	if err != nil {
		// Cleaned up even when the snapshot was cancelled, on a context the cancel does not reach.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		if ferr := workflow.ExecuteActivity(cleanupOptions(dctx), snapActs.FailSnapshot, ref).Get(dctx, nil); ferr != nil {
			workflow.GetLogger(ctx).Error("clean up failed snapshot", "snapshot", in.SnapshotID, "error", ferr)
		}
		return out, err
	}
	// Retention is housekeeping: the snapshot is complete whether or not it succeeds now, and the
	// next snapshot prunes again. It may compact a chain (a whole disk through the engine), so it
	// has a stream's time and heartbeats.
	var pruned activities.PruneSnapshotsResult
	err = workflow.ExecuteActivity(streamOptions(ctx), snapActs.PruneSnapshots, activities.PruneSnapshotsInput{
		BoxID: in.BoxID, Keep: in.Keep,
	}).Get(ctx, &pruned)
	if err != nil {
		workflow.GetLogger(ctx).Warn("apply snapshot retention", "box", in.BoxID, "error", err)
	}
	out.Pruned = pruned.Deleted
	return out, nil
}

// versionNodeQueue marks the snapshot workflow's exporting a box's disk on the queue of the node
// that holds it; before it, any worker exported it.
const versionNodeQueue = "node-queue"

// nodeQueueWait is how long an export waits for the node's own worker to take it before any
// worker does (every worker reaches every engine): a node without a worker of its own, or whose
// worker is down, is exported from elsewhere.
const nodeQueueWait = 30 * time.Second

// upload exports and uploads the snapshot's disk into up: on the queue of the node that holds
// the box when it is known, so the stream leaves the node only for S3, else on the shared one.
func upload(ctx workflow.Context, in SnapshotWorkflowInput, up *activities.UploadSnapshotResult) error {
	act := activities.UploadSnapshotInput{BoxID: in.BoxID, SnapshotID: in.SnapshotID, SandboxID: in.SandboxID}
	if in.Node != "" && workflow.GetVersion(ctx, versionNodeQueue, workflow.DefaultVersion, 1) >= 1 {
		if taken, err := onNodeQueue(streamOptions(ctx), in.Node, snapActs.UploadSnapshot, act, up); taken {
			return err
		}
	}
	return workflow.ExecuteActivity(streamOptions(ctx), snapActs.UploadSnapshot, act).Get(ctx, up)
}

// onNodeQueue runs act with actx's activity options on the queue of node's own worker, waiting
// nodeQueueWait for it to be taken there. taken is false when no worker of the node took it in
// time (none runs, or it is down): the caller then runs act where any worker takes it.
func onNodeQueue(actx workflow.Context, node string, act, in, out any) (taken bool, err error) {
	opts := workflow.GetActivityOptions(actx)
	opts.TaskQueue, opts.ScheduleToStartTimeout = NodeTaskQueue(node), nodeQueueWait
	ctx := workflow.WithActivityOptions(actx, opts)
	err = workflow.ExecuteActivity(ctx, act, in).Get(ctx, out)
	if notTaken(err) {
		workflow.GetLogger(ctx).Warn("no worker of the node took its work in time; any worker does it", "node", node)
		return false, nil
	}
	return true, err
}

// versionRestoreOnNode marks the box workflow's placing a restore first and running it on the
// chosen node's queue; before it, any worker placed and imported it.
const versionRestoreOnNode = "restore-on-node"

// restoreOnNode restores in into res on the queue of the node placement picks, by that node's
// own worker, so the object streams from S3 into the engine beside it and not through another
// host. When placement names no node, or no worker of the node takes the restore within
// nodeQueueWait, any worker places and restores it.
func restoreOnNode(ctx workflow.Context, in activities.RestoreSnapshotInput, res *activities.RestoreSnapshotResult) error {
	if workflow.GetVersion(ctx, versionRestoreOnNode, workflow.DefaultVersion, 1) >= 1 {
		var place activities.PlaceRestoreResult
		err := workflow.ExecuteLocalActivity(localStoreOptions(ctx), snapActs.PlaceRestore, activities.PlaceRestoreInput{
			Size: in.Size, Network: in.Network,
		}).Get(ctx, &place)
		if err == nil && place.Node != "" {
			onNode := in
			onNode.Node = place.Node
			if taken, err := onNodeQueue(streamOptions(ctx), place.Node, snapActs.RestoreSnapshot, onNode, res); taken {
				return err
			}
		}
		// A refused placement is said again, by the restore below, with the engine's word.
	}
	return workflow.ExecuteActivity(streamOptions(ctx), snapActs.RestoreSnapshot, in).Get(ctx, res)
}

// notTaken reports an activity no worker of its queue started in time.
func notTaken(err error) bool {
	var te *temporal.TimeoutError
	return errors.As(err, &te) && te.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START
}

// snapshot is the snapshot update: it streams the box's disk to object storage and answers the
// verified snapshot. The box stays usable meanwhile (state snapshotting).
func (w *box) snapshot(ctx workflow.Context, _ SnapshotInput) (SnapshotResult, error) {
	var res SnapshotResult
	st, err := w.operate(ctx, byUser, func(ctx workflow.Context) error {
		if err := w.allowed(UpdateSnapshot); err != nil {
			return err
		}
		out, err := w.snapshotLocked(ctx)
		res.Snapshot, res.Pruned = out.Snapshot, out.Pruned
		return err
	})
	res.Status = st
	return res, err
}

// snapshotLocked runs the snapshot child workflow for the box's sandbox and waits for it. A
// hibernated box is snapshotted too; an engine that wakes it for the checkpoint (upstream
// sandboxd; the local engine copies a sleeping box's disk as it is) leaves it awake, so it is
// hibernated again after.
func (w *box) snapshotLocked(ctx workflow.Context) (SnapshotWorkflowResult, error) {
	var out SnapshotWorkflowResult
	before := w.st.State
	if before != cocoonbox.BoxStateRunning && before != cocoonbox.BoxStateHibernated {
		return out, transitionError(UpdateSnapshot, "a box that is "+string(before))
	}
	if w.st.SandboxID == "" {
		return out, transitionError(UpdateSnapshot, "a box whose sandbox is gone (wake it first)")
	}
	id, err := newSnapshotID(ctx)
	if err != nil {
		return out, err
	}
	w.setState(ctx, cocoonbox.BoxStateSnapshotting)
	err = w.startSnapshot(ctx, id).Get(ctx, &out)
	if before == cocoonbox.BoxStateHibernated {
		herr := workflow.ExecuteActivity(sandboxOptions(ctx, time.Minute), sandboxActs.Hibernate,
			activities.SandboxInput{BoxID: w.in.BoxID, SandboxID: w.st.SandboxID}).Get(ctx, nil)
		if herr != nil && errorType(herr) != activities.ErrTypeSandboxGone {
			before = cocoonbox.BoxStateRunning // it is awake and could not be put back to sleep
		}
	}
	if err != nil {
		w.st.LastError = "snapshot: " + reason(err)
		w.setState(ctx, before)
		return out, err
	}
	w.st.LastError = ""
	w.st.LastSnapshot = out.Snapshot.ID
	w.st.Seal.Awake = out.Snapshot.Kind == cocoonbox.SnapshotKindState
	w.setState(ctx, before)
	w.event(ctx, "snapshot", out.Snapshot.ID)
	return out, nil
}

// restore is the restore update: the box comes back on a new sandbox built from the snapshot
// (the newest when none is named). Its current sandbox is released only after the new one
// answers, so a failed restore (a corrupted snapshot, no capacity) leaves the box as it was.
func (w *box) restore(ctx workflow.Context, in RestoreInput) (Status, error) {
	return w.operate(ctx, byUser, func(ctx workflow.Context) error {
		if err := w.allowed(UpdateRestore); err != nil {
			return err
		}
		if err := w.awaitSeal(ctx); err != nil {
			return err
		}
		before := w.st.State
		w.setState(ctx, cocoonbox.BoxStateRestoring)
		var res activities.RestoreSnapshotResult
		if err := w.restoreFrom(ctx, in.SnapshotID, &res); err != nil {
			w.st.LastError = "restore: " + reason(err)
			w.setState(ctx, before)
			return err
		}
		w.st.LastError = ""
		w.setState(ctx, cocoonbox.BoxStateRunning)
		return nil
	})
}

// restoreFrom swaps the box's sandbox for one restored from snapshotID ("" the newest) and
// answers which into res.
func (w *box) restoreFrom(ctx workflow.Context, snapshotID string, res *activities.RestoreSnapshotResult) error {
	return w.restoreAs(ctx, snapshotID, false, res)
}

// restoreAs is restoreFrom, giving the restored box an identity of its own when reseed is set
// (a fork restored from its parent's disk).
func (w *box) restoreAs(ctx workflow.Context, snapshotID string, reseed bool, res *activities.RestoreSnapshotResult) error {
	attempt := w.st.Attempt + 1
	in := activities.RestoreSnapshotInput{
		BoxID: w.in.BoxID, SnapshotID: snapshotID, Size: w.in.Size, Attempt: attempt, TTL: w.in.Policy.LeaseTTL,
		Network: w.in.Policy.Network,
	}
	if reseed {
		in.Reseed, in.Name = true, w.in.Name
	}
	if err := restoreOnNode(ctx, in, res); err != nil {
		return err
	}
	w.st.Attempt = attempt
	old := w.st.SandboxID
	w.st.SandboxID, w.st.Node = res.SandboxID, res.Node
	w.st.MoveFrom = "" // a new sandbox is placed anew: no move is owed
	w.st.LastSnapshot = res.SnapshotID
	w.leased(workflow.Now(ctx), res.Deadline)
	w.event(ctx, "restored", res.SnapshotID)
	if old != "" && old != res.SandboxID {
		w.releaseReplaced(ctx, old)
	}
	return nil
}

// versionReleaseBehind marks the box workflow's releasing a replaced sandbox after the operation
// that replaced it has answered. Before it, a restore or an adopt waited for the release (about
// 160 ms of an engine's release of a small box) before it answered.
const versionReleaseBehind = "release-behind"

// releaseReplaced releases sandbox id, which a restore or an adopt has just replaced: it no
// longer serves the box, so releasing it is cleanup, not the operation. Since
// versionReleaseBehind the box goes on meanwhile: a goroutine of the workflow takes the result,
// and the box drains it before it completes or continues as new, so the release is never cut
// off. A failed release is logged: the engine reaps the sandbox when its lease, no longer
// renewed, runs out.
func (w *box) releaseReplaced(ctx workflow.Context, id string) {
	f := workflow.ExecuteActivity(sandboxOptions(ctx, time.Minute), sandboxActs.Release,
		activities.SandboxInput{BoxID: w.in.BoxID, SandboxID: id})
	logged := func(ctx workflow.Context) {
		if err := f.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("release the replaced sandbox", "sandbox", id, "error", err)
		}
	}
	if w.version(ctx, versionReleaseBehind, 1) < 1 {
		logged(ctx)
		return
	}
	w.releasing++
	workflow.Go(ctx, func(ctx workflow.Context) {
		logged(ctx)
		w.releasing--
		w.gen++
	})
}

// versionLostFails marks the box workflow's refusing to bring a lost box back empty: before it,
// a box whose sandbox was lost with no snapshot was claimed anew from its template.
const versionLostFails = "lost-fails"

// replaceSandbox gives a box whose sandbox the engine lost a new one, from its newest snapshot,
// and says so. With no snapshot there is nothing to rebuild it from: the box is lost (ErrLost),
// and only its owner's recreate starts it again, empty.
func (w *box) replaceSandbox(ctx workflow.Context) error {
	says := w.version(ctx, versionLostFails, 1) >= 1
	var res activities.RestoreSnapshotResult
	err := w.restoreFrom(ctx, "", &res)
	if err == nil {
		now := workflow.Now(ctx)
		w.st.RestoredFrom = RestoredFrom{SnapshotID: res.SnapshotID, TakenAt: res.TakenAt, At: now}
		if says {
			w.event(ctx, "restored_after_loss", fmt.Sprintf("restored from %s taken %s before", res.SnapshotID, now.Sub(res.TakenAt).Round(time.Second)))
		}
		return nil
	}
	if errorType(err) != activities.ErrTypeNotFound {
		return err
	}
	if says && w.st.Attempt > 0 {
		w.event(ctx, "lost", "the sandbox is gone and the box has no snapshot")
		return temporal.NewApplicationError(ErrLost, ErrTypeInvalidTransition)
	}
	// A box whose create never got a sandbox has nothing to lose: its wake is the create again.
	w.event(ctx, "sandbox-from-template", "no snapshot to restore")
	return w.recreateSandbox(ctx)
}

// ErrLost is the last error of a box whose sandbox the engine lost when it had no snapshot.
const ErrLost = "lost: the box's sandbox is gone and it has no snapshot to rebuild it from; " +
	"recreate starts it again from its template, empty"

// recreateSandbox claims a new sandbox from the template and waits until it answers.
func (w *box) recreateSandbox(ctx workflow.Context) error {
	if err := w.claimNew(ctx); err != nil {
		return err
	}
	return w.waitReady(ctx)
}

func (w *box) validateRecreate(RecreateInput) error {
	if err := w.allowed(UpdateRecreate); err != nil {
		return err
	}
	if w.st.State != cocoonbox.BoxStateFailed || w.st.SandboxID != "" {
		return transitionError(UpdateRecreate, "a box that is not lost (only a failed box whose sandbox is gone is recreated)")
	}
	return nil
}

// recreate is the owner's choice for a lost box: a new sandbox from the template, empty.
func (w *box) recreate(ctx workflow.Context, in RecreateInput) (Status, error) {
	return w.operate(ctx, byUser, func(ctx workflow.Context) error {
		if err := w.validateRecreate(in); err != nil {
			return err
		}
		w.setState(ctx, cocoonbox.BoxStateWaking)
		if err := w.recreateSandbox(ctx); err != nil {
			w.st.LastError = "recreate: " + reason(err)
			w.setState(ctx, cocoonbox.BoxStateFailed)
			return err
		}
		w.st.LastError, w.st.RestoredFrom = "", RestoredFrom{}
		w.event(ctx, "recreated", "from the template, empty")
		w.setState(ctx, cocoonbox.BoxStateRunning)
		return nil
	})
}

// purgeSnapshots deletes every snapshot of the box, objects and rows.
func (w *box) purgeSnapshots(ctx workflow.Context) error {
	return workflow.ExecuteActivity(cleanupOptions(ctx), snapActs.PruneSnapshots, activities.PruneSnapshotsInput{
		BoxID: w.in.BoxID, All: true,
	}).Get(ctx, nil)
}

func (w *box) keep() int {
	if w.in.Policy.KeepSnapshots > 0 {
		return w.in.Policy.KeepSnapshots
	}
	return DefaultKeepSnapshots
}

// streamOptions are for the activities that stream a disk (upload, restore): they may take long,
// but they heartbeat their progress every few seconds, so a killed worker's stream is retried
// (from scratch) within seconds.
func streamOptions(ctx workflow.Context) workflow.Context {
	return sandboxOptions(ctx, 2*time.Hour)
}

// cleanupOptions are for activities that delete objects: longer than a row write.
func cleanupOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy:         retryPolicy(),
	})
}

// versionBackgroundSeal marks the box workflow's sealing a durable hibernate after the box
// sleeps, as a child workflow beside its operations. Before it, the snapshot came first and the
// hibernate waited for its upload.
const versionBackgroundSeal = "background-seal"

// versionFailedSealSleeps marks the box workflow's putting a sleeping box's sandbox back to sleep
// after a failed seal too. Before it, only a good seal did, and an engine that woke the sandbox
// for a seal that then failed left it awake under a hibernated box.
const versionFailedSealSleeps = "failed-seal-sleeps"

// seal asks for a background snapshot of the box's sandbox (a seal): it starts now, or when the
// one running ends, whose snapshot may predate what changed since.
func (w *box) seal(ctx workflow.Context) {
	if w.st.Seal.Running != "" {
		w.st.Seal.Again = true
		return
	}
	w.startSeal(ctx)
}

// startSeal starts the snapshot child workflow of a seal and has a goroutine of the workflow
// take its result, so the box answers operations while the snapshot uploads. The box waits for
// it before it continues as new, is deleted or swaps its sandbox (awaitSeal).
func (w *box) startSeal(ctx workflow.Context) {
	id, err := newSnapshotID(ctx)
	if err != nil {
		workflow.GetLogger(ctx).Error("new snapshot ID for a seal", "error", err)
		return
	}
	asleep, wakes := w.st.State == cocoonbox.BoxStateHibernated, w.wakes
	w.st.Seal = SealState{Running: id, Last: workflow.Now(ctx), Failures: w.st.Seal.Failures, Awake: w.st.Seal.Awake}
	w.gen++
	f := w.startSnapshot(ctx, id)
	workflow.Go(ctx, func(ctx workflow.Context) {
		var out SnapshotWorkflowResult
		err := f.Get(ctx, &out)
		w.st.Seal.Running = ""
		w.gen++
		if err != nil {
			// The box keeps its last good snapshot and tries again later, backing off. A seal
			// through the agent may have woken the sandbox before it failed, and its retry is
			// minutes away: the sandbox of a sleeping box goes back to sleep now.
			if asleep && w.version(ctx, versionFailedSealSleeps, 1) >= 1 {
				w.rehibernate(ctx, wakes)
			}
			w.st.Seal.Failures++
			wait := min(SealRetryFirst<<min(w.st.Seal.Failures-1, 6), SealRetryMax)
			w.st.Seal.RetryAt = workflow.Now(ctx).Add(wait)
			w.st.LastError = sealErrorPrefix + reason(err)
			w.event(ctx, "seal_failed", fmt.Sprintf("%s: %s; trying again in %s", id, reason(err), wait))
		} else {
			w.st.Seal.Failures, w.st.Seal.RetryAt = 0, time.Time{}
			w.st.LastSnapshot = out.Snapshot.ID
			w.st.Seal.Awake = out.Snapshot.Kind == cocoonbox.SnapshotKindState
			if w.st.Seal.Awake && asleep {
				w.rehibernate(ctx, wakes) // reaching its agent woke the sandbox
			}
			w.st.Seal.Sealed = asleep && w.wakes == wakes && w.st.State == cocoonbox.BoxStateHibernated
			if strings.HasPrefix(w.st.LastError, sealErrorPrefix) {
				w.st.LastError = "" // a failed seal's error, which this one repairs
			}
			w.event(ctx, "sealed", out.Snapshot.ID)
		}
		if w.st.Seal.Again && w.st.SandboxID != "" && !w.deleted {
			w.st.Seal.Again = false
			w.startSeal(ctx)
		}
	})
}

// rehibernate puts back to sleep the sandbox of a box that is still hibernated and has not woken
// since wakes, after a seal through its agent woke it. It holds the operations' lock, so no wake
// runs under it, and the box says it is still sealing meanwhile.
func (w *box) rehibernate(ctx workflow.Context, wakes int) {
	w.rehibernating = true
	defer func() { w.rehibernating = false; w.gen++ }()
	if err := w.mu.Lock(ctx); err != nil {
		return
	}
	defer w.mu.Unlock()
	if w.wakes != wakes || w.st.State != cocoonbox.BoxStateHibernated || w.st.SandboxID == "" {
		return
	}
	err := workflow.ExecuteActivity(sandboxOptions(ctx, time.Minute), sandboxActs.Hibernate,
		activities.SandboxInput{BoxID: w.in.BoxID, SandboxID: w.st.SandboxID}).Get(ctx, nil)
	if err != nil && errorType(err) != activities.ErrTypeSandboxGone {
		workflow.GetLogger(ctx).Warn("hibernate the sandbox a seal woke", "error", err)
	}
}

// sealErrorPrefix starts the last error a failed seal leaves, which the next good seal clears
// (and no other error: a failed wake's stays for its user to read).
const sealErrorPrefix = "seal: "

// newSnapshotID is a new snapshot's ID, recorded in history.
func newSnapshotID(ctx workflow.Context) (string, error) {
	var id string
	err := workflow.SideEffect(ctx, func(workflow.Context) any { return cocoonbox.NewSnapshotID() }).Get(&id)
	return id, err
}

// startSnapshot starts the child workflow that takes snapshot id of the box's sandbox.
func (w *box) startSnapshot(ctx workflow.Context, id string) workflow.ChildWorkflowFuture {
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: SnapshotWorkflowID(id), TaskQueue: TaskQueue})
	return workflow.ExecuteChildWorkflow(cctx, SnapshotWorkflow, SnapshotWorkflowInput{
		BoxID: w.in.BoxID, SnapshotID: id, SandboxID: w.st.SandboxID, Keep: w.keep(), Node: w.st.Node,
	})
}

// awaitSeal cancels a seal asked for and waits for the running one to end, before the box's
// sandbox is released or replaced under it.
func (w *box) awaitSeal(ctx workflow.Context) error {
	w.st.Seal.Again = false
	return workflow.Await(ctx, func() bool { return w.st.Seal.Running == "" })
}

// sealDue is when a running box that was active since its last seal is sealed again
// (Policy.SnapshotEvery), or a failed seal is tried again; zero when none is due.
func (w *box) sealDue() time.Time {
	if r := w.st.Seal.RetryAt; !r.IsZero() && w.st.Seal.Running == "" && w.st.SandboxID != "" &&
		(w.st.State == cocoonbox.BoxStateRunning || w.st.State == cocoonbox.BoxStateHibernated) {
		return r
	}
	every := w.in.Policy.SnapshotEvery
	if every <= 0 || w.st.State != cocoonbox.BoxStateRunning || w.st.SandboxID == "" || w.st.Seal.Running != "" ||
		!w.st.LastActive.After(w.st.Seal.Last) {
		return time.Time{}
	}
	return w.st.Seal.Last.Add(every)
}

// sealWord is Status.Seal.
func (w *box) sealWord() string {
	switch {
	case w.st.Seal.Running != "" || w.rehibernating:
		return SealSealing
	case w.st.Seal.Sealed && w.st.State == cocoonbox.BoxStateHibernated:
		return SealSealed
	}
	return ""
}
