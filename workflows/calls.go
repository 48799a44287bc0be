package workflows

import (
	"errors"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/loomhand/cocoonbox/activities"
)

// How the box workflow calls its activities: the options of each kind of call, and which calls
// run as local activities.

// versionLocalStoreWrites marks the box workflow's writing its status row and audit events as
// local activities: one marker event each in history, where an activity took three and a
// workflow task of its own.
const versionLocalStoreWrites = "local-store-writes"

// write runs one of the store's row writes (SetState, Event): a local activity, since it is a
// short database call on the worker that runs the workflow, unless the history predates that.
func (w *box) write(ctx workflow.Context, act, in any) error {
	if w.version(ctx, versionLocalStoreWrites, 1) == workflow.DefaultVersion {
		return workflow.ExecuteActivity(storeOptions(ctx), act, in).Get(ctx, nil)
	}
	return workflow.ExecuteLocalActivity(localStoreOptions(ctx), act, in).Get(ctx, nil)
}

func retryPolicy() *temporal.RetryPolicy {
	return &temporal.RetryPolicy{
		InitialInterval:        time.Second,
		BackoffCoefficient:     2,
		MaximumInterval:        30 * time.Second,
		MaximumAttempts:        10,
		NonRetryableErrorTypes: activities.NonRetryableErrorTypes(),
	}
}

// sandboxHeartbeatTimeout: the sandbox activities heartbeat every 2 s while the engine works, so
// a killed worker's call is retried after this rather than after its whole timeout.
const sandboxHeartbeatTimeout = 10 * time.Second

func sandboxOptions(ctx workflow.Context, timeout time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: timeout,
		HeartbeatTimeout:    sandboxHeartbeatTimeout,
		RetryPolicy:         retryPolicy(),
	})
}

func storeOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         retryPolicy(),
	})
}

// localStoreOptions bounds a local row write: it retries within the workflow task, then on timers
// the SDK schedules, and gives up after a minute (the write is best effort; the row catches up at
// the next transition).
func localStoreOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout:    10 * time.Second,
		ScheduleToCloseTimeout: time.Minute,
		RetryPolicy:            retryPolicy(),
	})
}

// errorType is the ApplicationError type behind an activity failure, or "".
func errorType(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Type()
	}
	return ""
}

// versionQuickCalls marks the box workflow's short calls (its row's creation, and the engine's
// claim, ready probe, wake and hibernate) being tried first as local activities. A create then
// runs in one workflow task where it took four, and a wake or a hibernate in one where each took
// two or three: every activity costs a workflow task after it (about 5 ms on the embedded
// server, more on a remote cluster) besides the call.
const versionQuickCalls = "quick-calls"

// quickTry bounds the local try of a call. It covers a desktop's wake or hibernate and its ready
// probe. A query of the workflow waits for the workflow task a try runs in; a longer try (a
// claim's) is cut into workflow tasks the SDK heartbeats, about eight seconds each.
const quickTry = 5 * time.Second

// claimTry bounds the local try of a claim instead: a cold start of the desktop on a busy node
// takes longer than quickTry, and a try cut short throws its start away (the engine stops a
// start whose request ends), so the activity after it would boot the box a second time from
// nothing.
const claimTry = 2 * time.Minute

// quickly runs act once as a local activity, in the workflow task that asked for it. When that
// try fails with an error worth another try (the engine busy, a timeout), act runs again as an
// activity with actx's options, which the server retries and the Temporal UI and boxsvc's
// "waiting for" show as before. Every act called so is safe to repeat: a claim adopts what its
// claim_ref already made, and the others are idempotent.
func (w *box) quickly(actx workflow.Context, act, in, out any) error {
	return w.quicklyWithin(actx, quickTry, act, in, out)
}

// quicklyWithin is quickly with a local try of up to try.
func (w *box) quicklyWithin(actx workflow.Context, try time.Duration, act, in, out any) error {
	if w.version(actx, versionQuickCalls, 1) != workflow.DefaultVersion {
		lctx := workflow.WithLocalActivityOptions(actx, workflow.LocalActivityOptions{
			StartToCloseTimeout: try,
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		})
		err := workflow.ExecuteLocalActivity(lctx, act, in).Get(actx, out)
		if err == nil || final(err) {
			return err
		}
		workflow.GetLogger(actx).Info("a quick try failed; trying again as an activity", "error", err)
	}
	return workflow.ExecuteActivity(actx, act, in).Get(actx, out)
}

// versionQuickOnNode marks the box workflow's trying a failed quick call on its sandbox (wake,
// hibernate, the ready probe) again on the queue of the node that holds the sandbox; before it,
// the tries after the first ran where any worker took them.
const versionQuickOnNode = "quick-on-node"

// quicklyOnNode is quickly for a call on the box's sandbox: its local try runs on the worker
// that runs the workflow, at the engine's address, and the tries after it on the queue of the
// node that holds the sandbox, beside its engine, so a control host cut off from the node does
// not keep trying through a network it cannot cross. When no worker of the node takes the call
// within nodeQueueWait (the node has none, or it is down with its node), any worker does.
func (w *box) quicklyOnNode(actx workflow.Context, act, in, out any) error {
	node := w.st.Node
	if node == "" || w.version(actx, versionQuickOnNode, 1) == workflow.DefaultVersion {
		return w.quickly(actx, act, in, out)
	}
	lctx := workflow.WithLocalActivityOptions(actx, workflow.LocalActivityOptions{
		StartToCloseTimeout: quickTry,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	err := workflow.ExecuteLocalActivity(lctx, act, in).Get(actx, out)
	if err == nil || final(err) {
		return err
	}
	workflow.GetLogger(actx).Info("a quick try failed; trying again on the node's queue", "node", node, "error", err)
	if taken, err := onNodeQueue(actx, node, act, in, out); taken {
		return err
	}
	return workflow.ExecuteActivity(actx, act, in).Get(actx, out)
}

// final reports whether err is one another try cannot change: a non-retryable activity error,
// or the workflow's own cancellation.
func final(err error) bool {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.NonRetryable() || slices.Contains(activities.NonRetryableErrorTypes(), app.Type())
	}
	var canceled *temporal.CanceledError
	return errors.As(err, &canceled)
}
