package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// Reconciler finds what a crash left half done and settles it from Temporal, the record of what
// is still under way. A snapshot row still uploading whose snapshot workflow is no longer running
// (a worker or the whole stack killed at the wrong moment, a workflow terminated by an operator)
// is marked failed, and retention then removes what it wrote, its multipart uploads included. A
// sandbox claimed for one of our boxes that neither the box's row nor its workflow holds (a claim
// whose answer was lost and a later attempt claimed again, a delete killed after the row and
// before the release) is released, rather than left running until its lease ends. It runs at
// start and then every Every.
type Reconciler struct {
	Temporal client.Client
	Store    *store.Store
	// Engine is the sandbox engine whose sandboxes are checked; nil checks none.
	Engine sandbox.Client
	// Every is how often it looks; 0 is five minutes.
	Every time.Duration
	// Grace is how old an upload must be before it is looked at; 0 is two minutes, so a snapshot
	// just begun, whose workflow Temporal is starting, is never settled under it.
	Grace time.Duration
	// BoxGrace is how long a box row must have kept a transient state, or how long ago a sandbox
	// must have been claimed, before it is looked at; 0 is ten minutes, longer than a claim takes
	// to reach the box's row.
	BoxGrace time.Duration
	Logger   *slog.Logger
	Now      func() time.Time
}

// reconcileBatch bounds the rows one pass reads.
const reconcileBatch = 100

// StartReconciler runs r until the returned func, which waits for it to stop.
func StartReconciler(r *Reconciler) (stop func()) {
	return runLoop(r.Run)
}

// runLoop runs run in a goroutine until the returned func, which cancels it and waits.
func runLoop(run func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx)
	}()
	return func() { cancel(); <-done }
}

// Run reconciles until ctx ends.
func (r *Reconciler) Run(ctx context.Context) {
	every := r.Every
	if every <= 0 {
		every = 5 * time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := r.Once(ctx); err != nil && ctx.Err() == nil {
			r.Logger.Warn("reconcile", "error", err)
		} else if n != (Settled{}) {
			r.Logger.Info("reconciled what a crash left half done", "snapshots", n.Snapshots, "boxes", n.Boxes, "sandboxes", n.Sandboxes)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Settled counts what one pass settled.
type Settled struct {
	Snapshots int // rows marked failed
	Boxes     int // rows set from their workflow
	Sandboxes int // sandboxes released
}

// Once makes one pass and returns what it settled. An error stops the pass: what it did not
// reach is left for the next.
func (r *Reconciler) Once(ctx context.Context) (Settled, error) {
	var n Settled
	var err error
	if n.Snapshots, err = r.uploads(ctx); err != nil {
		return n, err
	}
	if n.Boxes, err = r.boxes(ctx); err != nil {
		return n, err
	}
	n.Sandboxes, err = r.sandboxes(ctx)
	return n, err
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// uploads marks failed the stale uploads no workflow works on and returns how many.
func (r *Reconciler) uploads(ctx context.Context) (int, error) {
	grace := r.Grace
	if grace <= 0 {
		grace = 2 * time.Minute
	}
	rows, err := r.Store.StaleUploads(ctx, r.now().Add(-grace), reconcileBatch)
	if err != nil {
		return 0, err
	}
	failed := 0
	for _, s := range rows {
		run, err := r.describe(ctx, workflows.SnapshotWorkflowID(s.ID))
		if err != nil {
			return failed, err // Temporal cannot say: leave the row for the next pass
		}
		if run.running() {
			continue
		}
		if err := r.Store.FailSnapshot(ctx, s.ID); err != nil {
			return failed, err
		}
		failed++
		r.Logger.Warn("snapshot left uploading with no workflow working on it: marked failed",
			"snapshot", s.ID, "box", s.BoxID, "began", s.CreatedAt)
	}
	return failed, nil
}

func (r *Reconciler) boxGrace() time.Duration {
	if r.BoxGrace > 0 {
		return r.BoxGrace
	}
	return 10 * time.Minute
}

// boxes settles the box rows left in a transient state past the grace period whose workflow
// disagrees: a workflow no longer running leaves its box deleted when it was deleting and failed
// otherwise; an idle workflow in a settled state has its state written to the row. A workflow
// with an activity or child under way is left alone: it writes the row itself when it is done.
func (r *Reconciler) boxes(ctx context.Context) (int, error) {
	rows, err := r.Store.StaleTransientBoxes(ctx, r.now().Add(-r.boxGrace()), reconcileBatch)
	if err != nil {
		return 0, err
	}
	settled := 0
	for _, b := range rows {
		state, sandboxID, reason, err := r.boxTruth(ctx, b)
		if err != nil {
			return settled, err
		}
		if state == "" || state == b.State {
			continue
		}
		if err := r.Store.SetBoxState(ctx, b.ID, state, sandboxID, reason); err != nil {
			return settled, err
		}
		settled++
		r.Logger.Warn("box row left in a transient state its workflow is not in: set from the workflow",
			"box", b.ID, "row", b.State, "now", state, "reason", reason, "since", b.UpdatedAt)
	}
	return settled, nil
}

// boxTruth is the state box b's row should have from its workflow; "" when the workflow is
// under way or Temporal's answer leaves the row as it is.
func (r *Reconciler) boxTruth(ctx context.Context, b store.Box) (cocoonbox.BoxState, string, string, error) {
	run, err := r.describe(ctx, workflows.BoxWorkflowID(b.ID))
	switch {
	case err != nil:
		return "", "", "", err // Temporal cannot say: leave the row for the next pass
	case !run.running():
		if b.State == cocoonbox.BoxStateDeleting {
			return cocoonbox.BoxStateDeleted, "", "", nil
		}
		ended := "is gone"
		if run.status != enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED {
			ended = "ended (" + strings.ToLower(run.status.String()) + ")"
		}
		return cocoonbox.BoxStateFailed, "", fmt.Sprintf("the box's workflow %s while the box was %s", ended, b.State), nil
	case run.busy:
		return "", "", "", nil
	}
	st, err := workflows.GetStatus(ctx, r.Temporal, b.ID)
	if err != nil || st.State.Transient() {
		return "", "", "", err
	}
	reason := ""
	if st.State == cocoonbox.BoxStateFailed {
		reason = st.LastError
	}
	return st.State, st.SandboxID, reason, nil
}

// sandboxes releases the engine's sandboxes claimed for one of our boxes that the box no longer
// holds and returns how many. A sandbox is kept while the box's row names it, while the box's
// workflow holds it (its row not yet written) or is in the middle of an operation (a claim whose
// answer it has not yet seen), and while it is younger than the grace period. Sandboxes claimed
// under another reference are not ours to judge and are left to their lease.
func (r *Reconciler) sandboxes(ctx context.Context) (int, error) {
	if r.Engine == nil {
		return 0, nil
	}
	rows, err := r.Engine.List(ctx, "")
	if err != nil {
		return 0, fmt.Errorf("list the engine's sandboxes: %w", err)
	}
	released := 0
	for _, sb := range rows {
		box, ours := activities.ClaimRefBox(sb.ClaimRef)
		if !ours || sb.ClaimedAt.IsZero() || r.now().Sub(sb.ClaimedAt) < r.boxGrace() {
			continue
		}
		held, err := r.holds(ctx, box, sb.ID)
		if err != nil {
			return released, err
		}
		if held {
			continue
		}
		if err := r.Engine.Release(ctx, sandbox.SandboxRef{ID: sb.ID}); err != nil {
			return released, fmt.Errorf("release sandbox %s: %w", sb.ID, err)
		}
		released++
		r.Logger.Warn("sandbox claimed for a box that does not hold it: released",
			"sandbox", sb.ID, "box", box, "claim_ref", sb.ClaimRef, "claimed", sb.ClaimedAt)
	}
	return released, nil
}

// holds reports whether box has, or may be about to have, the sandbox id: its row names it, or
// its workflow runs and either names it or has work under way.
func (r *Reconciler) holds(ctx context.Context, box cocoonbox.BoxID, id string) (bool, error) {
	row, err := r.Store.BoxByID(ctx, box)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return false, err
	case row.DeletedAt == nil && row.SandboxID == id:
		return true, nil
	}
	run, err := r.describe(ctx, workflows.BoxWorkflowID(box))
	if err != nil || !run.running() {
		return false, err // on an error, Temporal cannot say: keep it for the next pass
	}
	if run.busy {
		return true, nil
	}
	st, err := workflows.GetStatus(ctx, r.Temporal, box)
	if err != nil {
		return false, err
	}
	return st.SandboxID == id, nil
}

// workflowRun is what Temporal says of a workflow's latest run.
type workflowRun struct {
	status enumspb.WorkflowExecutionStatus // unspecified: Temporal has no such workflow
	// busy: an activity, a child workflow or a workflow task is under way. A started workflow
	// task may be running local activities (the box workflow's quick engine calls), which
	// Temporal lists nowhere else.
	busy bool
}

func (w workflowRun) running() bool { return w.status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING }

// describe asks Temporal about the workflow id; a workflow it does not know is no error.
func (r *Reconciler) describe(ctx context.Context, id string) (workflowRun, error) {
	desc, err := r.Temporal.DescribeWorkflowExecution(ctx, id, "")
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return workflowRun{}, nil
	}
	if err != nil {
		return workflowRun{}, err
	}
	return workflowRun{
		status: desc.GetWorkflowExecutionInfo().GetStatus(),
		busy: len(desc.GetPendingActivities()) > 0 || len(desc.GetPendingChildren()) > 0 ||
			desc.GetPendingWorkflowTask().GetState() == enumspb.PENDING_WORKFLOW_TASK_STATE_STARTED,
	}, nil
}
