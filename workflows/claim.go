package workflows

import (
	"cmp"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

// How a box gets its sandbox: the create update, the claim and the ready probe.

// create claims the box's first sandbox and returns once it answers. A second create finds the
// box past creating and answers its status.
func (w *box) create(ctx workflow.Context, _ CreateInput) (Status, error) {
	return w.operate(ctx, byUser, func(ctx workflow.Context) error {
		if w.st.State != cocoonbox.BoxStateCreating {
			return nil
		}
		settled, err := w.claimFirst(ctx)
		if err != nil {
			w.fail(ctx, err)
			return err
		}
		w.st.LastError = ""
		w.st.Seal.Last = workflow.Now(ctx) // the first periodic seal counts from here
		if settled {
			w.become(cocoonbox.BoxStateRunning, nil)
			w.upsertState(ctx)
		} else {
			w.setState(ctx, cocoonbox.BoxStateRunning)
		}
		return nil
	})
}

// claimFirst writes the box's row and claims its first sandbox, returning once the sandbox
// answers; settled says the running row is written too. From version 5 of versionExplains the
// row is written while the engine claims and the running row once the sandbox answers: two
// local activities where four were, each a hop through the worker.
func (w *box) claimFirst(ctx workflow.Context) (settled bool, err error) {
	record := activities.RecordBoxInput{BoxID: w.in.BoxID, Owner: w.in.Owner, Name: w.in.Name, Size: w.in.Size}
	wait := cmp.Or(w.in.CreateWait, DefaultCreateWait)
	if w.current && w.in.Fork == nil {
		if err := w.claimWithin(ctx, wait, &record); err != nil {
			return false, err
		}
		var res activities.ReadyRecordedResult
		err := w.quicklyOnNode(w.readyOptions(ctx), sandboxActs.ReadyRecorded, activities.ReadyRecordedInput{
			SandboxInput: activities.SandboxInput{BoxID: w.in.BoxID, SandboxID: w.st.SandboxID},
			Then:         w.row(cocoonbox.BoxStateRunning, nil),
		}, &res)
		return res.Settled, err
	}
	if err := w.quickly(storeOptions(ctx), storeActs.RecordBox, record, nil); err != nil {
		return false, err
	}
	if w.in.Fork != nil {
		return false, w.claimFork(ctx)
	}
	if err := w.claimNewWithin(ctx, wait); err != nil {
		return false, err
	}
	return false, w.waitReady(ctx)
}

// claimNew claims the box's next sandbox under a new claim_ref attempt.
func (w *box) claimNew(ctx workflow.Context) error {
	return w.claim(sandboxOptions(ctx, 2*time.Minute), claimTry, nil)
}

// claimNewWithin is claimNew retried for as long as wait while the engine cannot hand out a
// sandbox (each try's failure is what a caller sees the box waiting for), then given up.
func (w *box) claimNewWithin(ctx workflow.Context, wait time.Duration) error {
	return w.claimWithin(ctx, wait, nil)
}

// claimWithin is claimNewWithin that writes record, when set, while the engine claims.
func (w *box) claimWithin(ctx workflow.Context, wait time.Duration, record *activities.RecordBoxInput) error {
	rp := retryPolicy()
	rp.MaximumAttempts = 0 // bounded by the wait instead
	return w.claim(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    2 * time.Minute,
		ScheduleToCloseTimeout: wait,
		HeartbeatTimeout:       sandboxHeartbeatTimeout,
		RetryPolicy:            rp,
	}), min(claimTry, wait), record)
}

// claim claims the box's next sandbox under a new claim_ref attempt, with ctx's activity options
// after a local try of up to try, writing record, when set, while the engine claims.
func (w *box) claim(ctx workflow.Context, try time.Duration, record *activities.RecordBoxInput) error {
	attempt := w.st.Attempt + 1
	var res activities.ClaimResult
	err := w.quicklyWithin(ctx, try, sandboxActs.Claim, activities.ClaimInput{
		BoxID: w.in.BoxID, Size: w.in.Size, Attempt: attempt, TTL: w.in.Policy.LeaseTTL, Network: w.in.Policy.Network,
		Record: record,
	}, &res)
	if err != nil {
		return err
	}
	// Counted only on success: a failed claim activity already retried under the same claim_ref,
	// and the next try adopts whatever it may have left behind.
	w.st.Attempt = attempt
	w.st.SandboxID, w.st.Node = res.SandboxID, res.Node
	w.st.MoveFrom = "" // a new sandbox is placed anew: no move is owed
	w.st.Start = res.Start
	w.leased(workflow.Now(ctx), res.Deadline)
	return nil
}

func (w *box) waitReady(ctx workflow.Context) error {
	return w.quicklyOnNode(w.readyOptions(ctx), sandboxActs.WaitReady,
		activities.SandboxInput{BoxID: w.in.BoxID, SandboxID: w.st.SandboxID}, nil)
}

// readyOptions are the options of a ready probe's tries after its local one.
func (w *box) readyOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		HeartbeatTimeout:    30 * time.Second, // WaitReady heartbeats every probe
		RetryPolicy:         retryPolicy(),
	})
}
