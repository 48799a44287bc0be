package workflows

import (
	"cmp"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

// Activities are called through nil pointers of their structs so calls stay type-checked.
var (
	sandboxActs *activities.Sandbox
	storeActs   *activities.Store
)

// Refusal words: what a refused update calls a box in the state it refuses.
const (
	stillCreating = "a box still being created"
	beingDeleted  = "a box being deleted"
)

// refusals is the lifecycle's table of refused transitions: for each update, the states it does
// not apply in and what the refusal calls a box in that state. A deleted box refuses every update;
// any pair not listed is allowed. A failed box may be woken and restored (that is how it is
// brought back, from its sandbox or an older snapshot) but not hibernated or snapshotted.
var refusals = map[string]map[cocoonbox.BoxState]string{
	UpdateCreate:      {cocoonbox.BoxStateDeleting: beingDeleted},
	UpdateWake:        {cocoonbox.BoxStateCreating: stillCreating, cocoonbox.BoxStateDeleting: beingDeleted},
	UpdateTakeOver:    {cocoonbox.BoxStateCreating: stillCreating, cocoonbox.BoxStateDeleting: beingDeleted},
	UpdateSetNetwork:  {cocoonbox.BoxStateCreating: stillCreating, cocoonbox.BoxStateDeleting: beingDeleted},
	UpdateRestore:     {cocoonbox.BoxStateCreating: stillCreating, cocoonbox.BoxStateDeleting: beingDeleted},
	UpdateRecreate:    {cocoonbox.BoxStateCreating: stillCreating, cocoonbox.BoxStateDeleting: beingDeleted},
	UpdateControlConn: {cocoonbox.BoxStateCreating: stillCreating, cocoonbox.BoxStateDeleting: beingDeleted},
	UpdateHibernate:   {cocoonbox.BoxStateCreating: stillCreating, cocoonbox.BoxStateDeleting: beingDeleted, cocoonbox.BoxStateFailed: "a failed box (wake it first)"},
	UpdateSnapshot:    {cocoonbox.BoxStateCreating: stillCreating, cocoonbox.BoxStateDeleting: beingDeleted, cocoonbox.BoxStateFailed: "a failed box (wake it first)"},
	UpdateMove:        {cocoonbox.BoxStateCreating: stillCreating, cocoonbox.BoxStateDeleting: beingDeleted, cocoonbox.BoxStateFailed: "a failed box (its next wake places it anew)"},
	UpdateAdopt:       {cocoonbox.BoxStateCreating: stillCreating, cocoonbox.BoxStateDeleting: beingDeleted},
	UpdateFork:        {cocoonbox.BoxStateCreating: stillCreating, cocoonbox.BoxStateDeleting: beingDeleted, cocoonbox.BoxStateFailed: "a failed box (wake it first)"},
}

// allowed is every lifecycle update's validator: it rejects a message that cannot apply to the
// current state (refusals) before anything is written to history.
func (w *box) allowed(update string) error {
	s := w.st.State
	if s == cocoonbox.BoxStateDeleted || w.deleted {
		return transitionError(update, "a deleted box")
	}
	if what, refused := refusals[update][s]; refused {
		return transitionError(update, what)
	}
	return nil
}

func (w *box) validateRestore(in RestoreInput) error {
	if in.SnapshotID != "" {
		if err := cocoonbox.ValidateSnapshotID("snapshot_id", in.SnapshotID); err != nil {
			return temporal.NewApplicationError(err.Error(), activities.ErrTypeInvalidArgument)
		}
	}
	return w.allowed(UpdateRestore)
}

func transitionError(update, what string) error {
	return temporal.NewApplicationError("cannot "+update+" "+what, ErrTypeInvalidTransition)
}

func (w *box) validatePolicy(p SetPolicyInput) error {
	if w.deleted || w.st.State == cocoonbox.BoxStateDeleted {
		return transitionError(UpdateSetPolicy, "a deleted box")
	}
	invalid := func(msg string) error { return temporal.NewApplicationError(msg, activities.ErrTypeInvalidArgument) }
	switch {
	case p.IdleAfter != nil && *p.IdleAfter < 0:
		return invalid(fmt.Sprintf("idle: must not be negative, got %s", *p.IdleAfter))
	case p.LeaseTTL != nil && *p.LeaseTTL < 0:
		return invalid(fmt.Sprintf("lease: must not be negative, got %s", *p.LeaseTTL))
	case p.KeepSnapshots != nil && *p.KeepSnapshots < 0:
		return invalid(fmt.Sprintf("keep_snapshots: must not be negative, got %d", *p.KeepSnapshots))
	case p.SnapshotEvery != nil && *p.SnapshotEvery < 0:
		return invalid(fmt.Sprintf("snapshot_every: must not be negative, got %s", *p.SnapshotEvery))
	case p.LeaseIdle != nil && *p.LeaseIdle < 0:
		return invalid(fmt.Sprintf("lease_idle: must not be negative, got %s", *p.LeaseIdle))
	}
	return nil
}

// origin says who asked for an operation: a user's restarts the idle clock when it ends, the
// box's own timers' does not.
type origin int

const (
	byUser origin = iota
	byTimer
)

// operate runs op under the workflow mutex, so operations never interleave, and answers the status
// after it. The box counts as busy from acceptance on, which keeps the idle clock stopped.
func (w *box) operate(ctx workflow.Context, from origin, op func(workflow.Context) error) (Status, error) {
	w.busy++
	w.gen++
	defer func() {
		w.busy--
		w.gen++
		if from == byUser {
			w.st.LastActive = workflow.Now(ctx)
		}
	}()
	if err := w.mu.Lock(ctx); err != nil {
		return w.status(), err
	}
	defer w.mu.Unlock()
	w.ops++
	err := op(ctx)
	return w.status(), err
}

// wake brings the box back to running. A sandbox the engine lost is replaced by a new claim.
func (w *box) wake(ctx workflow.Context, in WakeInput) (Status, error) {
	return w.operate(ctx, byUser, func(ctx workflow.Context) error {
		if err := w.allowed(UpdateWake); err != nil {
			return err // the state changed while this update waited for the mutex
		}
		if w.st.State == cocoonbox.BoxStateRunning {
			return nil
		}
		before := w.st.State
		w.setState(ctx, cocoonbox.BoxStateWaking)
		var err error
		if w.st.SandboxID == "" {
			err = w.replaceSandbox(ctx)
		} else {
			err = w.quicklyOnNode(sandboxOptions(ctx, time.Minute), sandboxActs.Wake,
				activities.SandboxInput{BoxID: w.in.BoxID, SandboxID: w.st.SandboxID}, nil)
			switch {
			case errorType(err) == activities.ErrTypeSandboxGone:
				// The lease was reaped or the node lost it: the box comes back on a new sandbox,
				// from its newest snapshot.
				w.event(ctx, "sandbox-replaced", w.st.SandboxID)
				w.st.SandboxID = ""
				err = w.replaceSandbox(ctx)
			case err == nil:
				err = w.waitReady(ctx)
			}
			if err == nil && w.st.MoveFrom != "" {
				w.setState(ctx, cocoonbox.BoxStateRunning)
				w.moveOnWake(ctx)
			}
		}
		if err != nil {
			// A failed wake leaves the box as it was, so the user can retry.
			w.st.LastError = reason(err)
			if before == cocoonbox.BoxStateFailed || w.st.SandboxID == "" {
				before = cocoonbox.BoxStateFailed
			}
			w.setState(ctx, before)
			return err
		}
		w.st.LastError = ""
		if w.explains {
			w.settle(ctx, cocoonbox.BoxStateRunning, "woke", cmp.Or(in.Reason, "requested"))
		} else {
			w.setState(ctx, cocoonbox.BoxStateRunning)
		}
		return nil
	})
}

// hibernate frees the box's CPU and memory; a hibernated box answers its status.
func (w *box) hibernate(ctx workflow.Context, in HibernateInput) (Status, error) {
	return w.operate(ctx, byUser, func(ctx workflow.Context) error {
		if err := w.allowed(UpdateHibernate); err != nil {
			return err
		}
		why := requested
		if w.explains && in.By != "" {
			why = requested + " by " + hibernateReason(in.By)
		}
		return w.hibernateLocked(ctx, why)
	})
}

// hibernateReason is why the box goes to sleep; the audit event records it.
type hibernateReason string

const (
	requested hibernateReason = "requested" // a user asked: a failed snapshot before it refuses
	idle      hibernateReason = "idle"      // the idle clock ran out: the box sleeps regardless
)

func (w *box) hibernateLocked(ctx workflow.Context, why hibernateReason) error {
	if w.st.State == cocoonbox.BoxStateHibernated {
		return nil
	}
	durable := w.in.Policy.DurableHibernate && w.st.SandboxID != ""
	background := durable && w.version(ctx, versionBackgroundSeal, 1) >= 1 &&
		!w.st.Seal.Awake
	if durable && !background {
		// The memory image stays on the engine's node; the snapshot is what survives its loss.
		if _, err := w.snapshotLocked(ctx); err != nil {
			if why != idle {
				return err // the box keeps running and the user can retry
			}
			// The idle box still goes to sleep to free the node; its last good snapshot stays.
			w.event(ctx, "snapshot-before-hibernate-failed", err.Error())
		}
	}
	sb := activities.SandboxInput{BoxID: w.in.BoxID, SandboxID: w.st.SandboxID}
	var err error
	if w.sleepsInOne {
		// Both rows in the local activity that calls the engine; the search attribute is set
		// once, to where the box ends (or stays).
		var res activities.HibernateRecordedResult
		then := w.row(cocoonbox.BoxStateHibernated, &activities.EventInput{BoxID: w.in.BoxID, Kind: "hibernated", Detail: string(why)})
		err = w.quicklyOnNode(sandboxOptions(ctx, time.Minute), sandboxActs.HibernateRecorded,
			activities.HibernateRecordedInput{SandboxInput: sb, Record: w.become(cocoonbox.BoxStateHibernating, nil), Then: &then}, &res)
		if err == nil && res.Settled {
			w.st.LastError = ""
			w.become(cocoonbox.BoxStateHibernated, nil)
			w.upsertState(ctx)
			w.afterSleep(ctx, background)
			return nil
		}
	} else if w.recordsSleep {
		// The row says hibernating before the engine call, written by the same local activity
		// (HibernateRecorded), which makes no engine call when the row cannot be written.
		err = w.quicklyOnNode(sandboxOptions(ctx, time.Minute), sandboxActs.HibernateRecorded,
			activities.HibernateRecordedInput{SandboxInput: sb, Record: w.enter(ctx, cocoonbox.BoxStateHibernating, nil)}, nil)
	} else {
		if err := w.moveTo(ctx, cocoonbox.BoxStateHibernating); err != nil &&
			w.version(ctx, versionRecordedSleep, 1) >= 1 {
			// The API reaches the sandbox of a box whose row says it runs without asking this
			// workflow, and an engine call wakes a sleeping sandbox: the box sleeps only once
			// its row says so (the row write has had its minute of retries).
			w.st.LastError = "hibernate: record the box's state: " + reason(err)
			w.setState(ctx, cocoonbox.BoxStateRunning)
			return err
		}
		err = w.quicklyOnNode(sandboxOptions(ctx, time.Minute), sandboxActs.Hibernate, sb, nil)
	}
	switch {
	case errorType(err) == activities.ErrTypeSandboxGone:
		w.st.SandboxID = "" // nothing left to hibernate; wake claims a new one
	case err != nil:
		w.st.LastError = reason(err)
		w.setState(ctx, cocoonbox.BoxStateRunning)
		return err
	}
	w.st.LastError = ""
	w.settle(ctx, cocoonbox.BoxStateHibernated, "hibernated", string(why))
	w.afterSleep(ctx, background)
	return nil
}

// afterSleep starts the background seal of a box that went to sleep, when it has one.
func (w *box) afterSleep(ctx workflow.Context, background bool) {
	if background && w.st.SandboxID != "" {
		// The memory image stays on the engine's node; the seal, uploading while the box sleeps,
		// is what survives the node's loss.
		w.seal(ctx)
	}
}

// delete releases the sandbox and records the box deleted; the workflow then completes.
func (w *box) delete(ctx workflow.Context, in DeleteInput) (Status, error) {
	return w.operate(ctx, byUser, func(ctx workflow.Context) error {
		if err := w.allowed(UpdateDelete); err != nil {
			return err
		}
		before := w.st.State
		w.setState(ctx, cocoonbox.BoxStateDeleting)
		if err := w.awaitSeal(ctx); err != nil {
			return err
		}
		if in.PurgeSnapshots {
			// Before the release, so a failed purge leaves the box whole and the delete retryable.
			if err := w.purgeSnapshots(ctx); err != nil {
				w.st.LastError = reason(err)
				w.setState(ctx, before)
				return err
			}
		}
		err := workflow.ExecuteActivity(sandboxOptions(ctx, time.Minute), sandboxActs.Release,
			activities.SandboxInput{BoxID: w.in.BoxID, SandboxID: w.st.SandboxID}).Get(ctx, nil)
		if err != nil {
			// A failed delete can be retried; the box keeps the state it had.
			w.st.LastError = reason(err)
			w.setState(ctx, before)
			return err
		}
		w.st.SandboxID = ""
		// The workflow ends here, and its timers with it: a fork checkpoint still kept goes now
		// (a fork claiming from it at this moment finishes first; one yet to start fails).
		for i := range w.st.Forks {
			w.st.Forks[i].Until = time.Time{}
		}
		w.dropForks(ctx)
		w.setState(ctx, cocoonbox.BoxStateDeleted)
		w.deleted = true
		return nil
	})
}

// setPolicy replaces the fields of the policy in carries (never the network: SetNetwork
// changes it); the main loop re-plans the idle timer.
func (w *box) setPolicy(ctx workflow.Context, in SetPolicyInput) (Status, error) {
	in.ApplyTo(&w.in.Policy)
	w.gen++
	return w.status(), nil
}

// hasNIC reports whether policy n gives a box a NIC (the engine's egress lane).
func hasNIC(n cocoonbox.Network) bool {
	return n.Policy != "" && n.Policy != cocoonbox.NetworkNone
}

func (w *box) validateSetNetwork(in SetNetworkInput) error {
	if err := w.allowed(UpdateSetNetwork); err != nil {
		return err
	}
	if err := in.Network.Validate(); err != nil {
		return temporal.NewApplicationError(err.Error(), activities.ErrTypeInvalidArgument)
	}
	if hasNIC(in.Network) != hasNIC(w.in.Policy.Network) {
		return temporal.NewApplicationError("setnetwork: whether a box has a network is fixed at its create (this one's is "+
			w.in.Policy.Network.Policy+"); internet and allow-lists change into each other", ErrTypeInvalidTransition)
	}
	return nil
}

// setNetwork applies a new egress policy to the box's sandbox, if it has one, then keeps it for
// every sandbox after; a policy the engine refused leaves the old one in place.
func (w *box) setNetwork(ctx workflow.Context, in SetNetworkInput) (Status, error) {
	return w.operate(ctx, byUser, func(ctx workflow.Context) error {
		if err := w.validateSetNetwork(in); err != nil {
			return err // the box changed while this update waited for the mutex
		}
		if w.st.SandboxID != "" && hasNIC(in.Network) {
			err := workflow.ExecuteActivity(sandboxOptions(ctx, time.Minute), sandboxActs.SetEgress, activities.SetEgressInput{
				BoxID: w.in.BoxID, SandboxID: w.st.SandboxID, Network: in.Network,
			}).Get(ctx, nil)
			if err != nil && errorType(err) != activities.ErrTypeSandboxGone { // a gone one's successor gets it at claim
				return err
			}
		}
		w.in.Policy.Network = in.Network
		w.event(ctx, "network", in.Network.Policy)
		return nil
	})
}

// renewLocked extends the lease. A lost sandbox fails a running box (wake replaces it) and leaves
// a hibernated one to be replaced at its next wake.
func (w *box) renewLocked(ctx workflow.Context) error {
	if w.st.SandboxID == "" {
		return nil
	}
	var res activities.RenewResult
	err := workflow.ExecuteActivity(sandboxOptions(ctx, time.Minute), sandboxActs.Renew, activities.RenewInput{
		BoxID: w.in.BoxID, SandboxID: w.st.SandboxID, TTL: w.in.Policy.LeaseTTL,
	}).Get(ctx, &res)
	now := workflow.Now(ctx)
	switch {
	case err == nil:
		w.leased(now, res.Deadline)
	case errorType(err) == activities.ErrTypeSandboxGone:
		w.event(ctx, "sandbox-lost", w.st.SandboxID)
		w.st.SandboxID, w.st.NextRenew = "", time.Time{}
		if w.st.State == cocoonbox.BoxStateRunning {
			w.st.LastError = "sandbox lost: " + reason(err)
			w.setState(ctx, cocoonbox.BoxStateFailed)
		}
	case errorType(err) == activities.ErrTypeConflict:
		w.st.NextRenew = time.Time{} // the engine will not renew it in this state; wake renews
	default:
		// Try again at a third of what is left, so a flaky engine gets several chances.
		w.st.LastError = reason(err)
		w.st.NextRenew = now.Add(max(w.st.Deadline.Sub(now)/3, 10*time.Second))
	}
	return err
}

// leased records a lease granted at now and plans its renewal at two thirds of it.
func (w *box) leased(now, deadline time.Time) {
	w.st.Deadline = deadline
	if deadline.IsZero() || !deadline.After(now) {
		w.st.NextRenew = time.Time{}
		return
	}
	w.st.NextRenew = now.Add(deadline.Sub(now) * 2 / 3)
}

// fail moves the box to failed with the error as its reason.
func (w *box) fail(ctx workflow.Context, err error) {
	w.st.LastError = reason(err)
	w.setState(ctx, cocoonbox.BoxStateFailed)
}

// versionRecordedSleep marks a hibernate that stops when the box row cannot be moved to
// hibernating. Before it, the hibernate went on and the row kept saying running.
const versionRecordedSleep = "recorded-sleep"

// setState moves the box to s, keeps the BoxState search attribute and the box row current.
func (w *box) setState(ctx workflow.Context, s cocoonbox.BoxState) {
	// The workflow is the source of truth; a row that could not be written is logged, not fatal.
	if err := w.moveTo(ctx, s); err != nil {
		workflow.GetLogger(ctx).Warn("record box state", "state", s, "error", err)
	}
}

// settle is setState then event, in one local activity when the run settles (one row write
// and one hop through the worker fewer on every hibernate and wake, about 1.5 ms of each).
func (w *box) settle(ctx workflow.Context, s cocoonbox.BoxState, kind, detail string) {
	if !w.settles {
		w.setState(ctx, s)
		w.event(ctx, kind, detail)
		return
	}
	if err := w.record(ctx, s, &activities.EventInput{BoxID: w.in.BoxID, Kind: kind, Detail: detail}); err != nil {
		workflow.GetLogger(ctx).Warn("record box state and event", "state", s, "kind", kind, "error", err)
	}
}

// moveTo is setState returning the failure to write the box row, for the one transition that
// must not happen unrecorded (hibernating).
func (w *box) moveTo(ctx workflow.Context, s cocoonbox.BoxState) error {
	return w.record(ctx, s, nil)
}

// record moves the box to s, keeps the BoxState search attribute current and writes the box
// row, with ev appended to the box's events in the same write when it is not nil.
func (w *box) record(ctx workflow.Context, s cocoonbox.BoxState, ev *activities.EventInput) error {
	return w.write(ctx, storeActs.SetState, w.enter(ctx, s, ev))
}

// enter moves the box to s and keeps the BoxState search attribute current, returning the box
// row to write (with ev appended to the box's events in the same write when it is not nil).
func (w *box) enter(ctx workflow.Context, s cocoonbox.BoxState, ev *activities.EventInput) activities.SetStateInput {
	in := w.become(s, ev)
	w.upsertState(ctx)
	return in
}

// become is enter without the search attribute, for a state the box leaves within the same
// workflow task.
func (w *box) become(s cocoonbox.BoxState, ev *activities.EventInput) activities.SetStateInput {
	w.st.State = s
	w.gen++
	switch s {
	case cocoonbox.BoxStateWaking, cocoonbox.BoxStateRunning:
		w.wakes++ // what a seal of the sleeping box holds is no longer all of it
		w.st.Seal.Sealed = false
	}
	return w.row(s, ev)
}

// row is the box row of state s, with ev appended to the box's events when it is not nil.
func (w *box) row(s cocoonbox.BoxState, ev *activities.EventInput) activities.SetStateInput {
	reason := ""
	if s == cocoonbox.BoxStateFailed {
		reason = w.st.LastError
	}
	return activities.SetStateInput{BoxID: w.in.BoxID, State: s, SandboxID: w.st.SandboxID, Reason: reason, Event: ev}
}

// upsertState keeps the BoxState search attribute at the box's state.
func (w *box) upsertState(ctx workflow.Context) {
	if err := workflow.UpsertTypedSearchAttributes(ctx, SearchAttrBoxState.ValueSet(string(w.st.State))); err != nil {
		workflow.GetLogger(ctx).Warn("upsert BoxState", "error", err)
	}
}

// event appends an audit event, best effort.
func (w *box) event(ctx workflow.Context, kind, detail string) {
	err := w.write(ctx, storeActs.Event, activities.EventInput{BoxID: w.in.BoxID, Kind: kind, Detail: detail})
	if err != nil {
		workflow.GetLogger(ctx).Warn("record box event", "kind", kind, "error", err)
	}
}
