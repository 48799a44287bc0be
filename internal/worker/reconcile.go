package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// Reconciler finds rows a crash left in a transient state and settles them from Temporal, the
// record of what is still under way: a snapshot row still uploading whose snapshot workflow is
// no longer running (a worker or the whole stack killed at the wrong moment, a workflow
// terminated by an operator) is marked failed, and retention then removes what it wrote, its
// multipart uploads included. It runs at start and then every Every.
type Reconciler struct {
	Temporal client.Client
	Store    *store.Store
	// Every is how often it looks; 0 is five minutes.
	Every time.Duration
	// Grace is how old an upload must be before it is looked at; 0 is two minutes, so a snapshot
	// just begun, whose workflow Temporal is starting, is never settled under it.
	Grace  time.Duration
	Logger *slog.Logger
	Now    func() time.Time
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
		} else if n > 0 {
			r.Logger.Info("reconciled rows left in a transient state", "snapshots", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once settles the stale uploads of one pass and returns how many it marked failed.
func (r *Reconciler) Once(ctx context.Context) (int, error) {
	now, grace := time.Now, r.Grace
	if r.Now != nil {
		now = r.Now
	}
	if grace <= 0 {
		grace = 2 * time.Minute
	}
	rows, err := r.Store.StaleUploads(ctx, now().Add(-grace), reconcileBatch)
	if err != nil {
		return 0, err
	}
	failed := 0
	for _, s := range rows {
		live, err := r.running(ctx, workflows.SnapshotWorkflowID(s.ID))
		if err != nil {
			return failed, err // Temporal cannot say: leave the row for the next pass
		}
		if live {
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

// running reports whether the workflow id has a run that is still going.
func (r *Reconciler) running(ctx context.Context, id string) (bool, error) {
	desc, err := r.Temporal.DescribeWorkflowExecution(ctx, id, "")
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}
