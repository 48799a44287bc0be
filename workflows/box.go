package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

// BoxWorkflow is a box's entity workflow (ID BoxWorkflowID): it owns the box's lifecycle from
// create to delete, serving the Update*, Signal* and QueryStatus messages, hibernating the box
// when it is idle, renewing its sandbox lease and continuing as new as history grows.
func BoxWorkflow(ctx workflow.Context, in BoxWorkflowInput) error {
	if err := in.BoxID.Validate(); err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), activities.ErrTypeInvalidArgument, err)
	}
	w := newBox(ctx, in)
	if err := w.setup(ctx); err != nil {
		return err
	}
	return w.run(ctx)
}

// box is one run of the entity workflow.
type box struct {
	in    BoxWorkflowInput
	st    BoxCarriedState
	mu    workflow.Mutex
	ops   int    // operations served by this run, for continue-as-new
	busy  int    // operations accepted and not finished: idle never counts while one is pending
	gen   uint64 // bumped by every message, so the main loop re-plans its timers
	wakes int    // times the box came back to running in this run, so a seal knows it slept throughout
	// rehibernating: a seal through the box's agent woke its sandbox, which is being put back to
	// sleep; the seal is not over until it is.
	rehibernating bool
	deleted       bool
	releasing     int // replaced sandboxes whose release is under way (releaseReplaced)
	// explains is whether this run says why the box sleeps and wakes (idle_warning, reasons):
	// not in histories recorded before it (versionExplains).
	explains bool
	// settles is whether this run writes the state a hibernate or a wake ends in and its event
	// in one local activity (settle): version 2 of versionExplains.
	settles bool
	// recordsSleep is whether this run writes the hibernating row in the local activity that
	// hibernates the sandbox (HibernateRecorded): version 3 of versionExplains.
	recordsSleep bool
	// sleepsInOne is whether that local activity also writes the hibernated row and its event,
	// and the BoxState search attribute skips hibernating, which no one could see between the
	// two upserts of one workflow task: version 4 of versionExplains.
	sleepsInOne bool
	// current is whether this run started at version 5 of versionExplains, whose changes it has
	// all without a marker of each (version), and whose create claims, records and readies the
	// box in two local activities where it took four (createInTwo).
	current bool
}

// versionExplains marks the box workflow's explaining itself: an idle_warning event before an
// idle hibernate, and the reason of every wake and requested hibernate in its events; its
// version 2 also settles (box.settles), its version 3 records the hibernating row with the
// engine call (box.recordsSleep), its version 4 the hibernated row too (box.sleepsInOne) and its
// version 5 stands for every change before it (box.current). Asked once when a run starts, so it
// costs a wake no history.
const versionExplains = "explains"

func newBox(ctx workflow.Context, in BoxWorkflowInput) *box {
	w := &box{in: in, mu: workflow.NewMutex(ctx)}
	if in.State != nil {
		w.st = *in.State
	} else {
		w.st = BoxCarriedState{State: cocoonbox.BoxStateCreating, LastActive: workflow.Now(ctx)}
	}
	if w.in.Size == "" {
		w.in.Size = cocoonbox.DefaultSize
	}
	w.in.State = nil
	if w.st.Runs == nil {
		// State carried from a run that predates the list: its runs are the pins with run IDs.
		for _, ref := range w.st.Pins {
			if strings.HasPrefix(ref, RunIDPrefix) {
				w.st.Runs = append(w.st.Runs, ref)
			}
		}
	}
	return w
}

// setup registers the query, the updates with their validators and the signals.
func (w *box) setup(ctx workflow.Context) error {
	v := workflow.GetVersion(ctx, versionExplains, workflow.DefaultVersion, 5)
	w.explains, w.settles, w.recordsSleep, w.sleepsInOne, w.current = v >= 1, v >= 2, v >= 3, v >= 4, v >= 5
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (Status, error) {
		return w.status(), nil
	}); err != nil {
		return err
	}
	updates := []struct {
		name     string
		handler  any
		validate any
	}{
		{UpdateCreate, w.create, func(CreateInput) error { return w.allowed(UpdateCreate) }},
		{UpdateWake, w.wake, func(WakeInput) error { return w.allowed(UpdateWake) }},
		{UpdateHibernate, w.hibernate, func(HibernateInput) error { return w.allowed(UpdateHibernate) }},
		{UpdateDelete, w.delete, func(DeleteInput) error { return w.allowed(UpdateDelete) }},
		{UpdateSetPolicy, w.setPolicy, w.validatePolicy},
		{UpdateSnapshot, w.snapshot, func(SnapshotInput) error { return w.allowed(UpdateSnapshot) }},
		{UpdateRestore, w.restore, w.validateRestore},
		{UpdateTakeOver, w.takeOver, w.validateTakeOver},
		{UpdateHandBack, w.handBack, w.validateHandBack},
		{UpdateSetNetwork, w.setNetwork, w.validateSetNetwork},
		{UpdateRecreate, w.recreate, w.validateRecreate},
		{UpdateControlConn, w.controlConn, w.validateControlConn},
		{UpdateMove, w.move, w.validateMove},
		{UpdateFork, w.fork, w.validateFork},
		{UpdateAdopt, w.adopt, w.validateAdopt},
	}
	for _, u := range updates {
		if err := workflow.SetUpdateHandlerWithOptions(ctx, u.name, u.handler,
			workflow.UpdateHandlerOptions{Validator: u.validate}); err != nil {
			return err
		}
	}
	for _, sig := range w.signals() {
		ch := workflow.GetSignalChannel(ctx, sig.name)
		workflow.Go(ctx, func(ctx workflow.Context) {
			for sig.apply(ctx, ch, true) {
				w.gen++
			}
		})
	}
	// One upsert whatever it holds: replay matches an upsert by its kind, not its attributes.
	return workflow.UpsertTypedSearchAttributes(ctx, w.in.searchAttributes(w.st.State)...)
}

// searchAttributes are the box's search attributes in state s.
func (in BoxWorkflowInput) searchAttributes(s cocoonbox.BoxState) []temporal.SearchAttributeUpdate {
	attrs := []temporal.SearchAttributeUpdate{
		SearchAttrOwner.ValueSet(in.Owner),
		SearchAttrBoxName.ValueSet(in.Name),
		SearchAttrBoxState.ValueSet(string(s)),
	}
	if in.OwnerName != "" {
		attrs = append(attrs, SearchAttrOwnerName.ValueSet(in.OwnerName))
	}
	return attrs
}

// signal is one of the box's signals: its name and how to apply what arrives on its channel.
type signal struct {
	name string
	// apply receives one signal from ch (waiting for it when block, else only if one is there)
	// and applies it; it reports whether there was one.
	apply func(ctx workflow.Context, ch workflow.ReceiveChannel, block bool) bool
}

// signals is where each signal's meaning is written, once: the listeners apply signals as they
// come, and continueAsNew applies those not yet read, with the same code.
func (w *box) signals() []signal {
	return []signal{
		{SignalTouch, applySignal(func(ctx workflow.Context, _ struct{}) { w.touch(ctx) })},
		{SignalViewers, applySignal(func(ctx workflow.Context, s ViewersSignal) {
			w.reportViewers(ctx, s)
			w.touch(ctx)
		})},
		{SignalPin, applySignal(w.pin)},
		{SignalUnpin, applySignal(w.unpin)},
		{SignalControlClosed, applySignal(w.controlClosed)},
		{SignalSandboxLost, applySignal(w.sandboxLost)},
		{SignalForkClaimed, applySignal(w.forkClaimed)},
	}
}

// applySignal makes a signal's apply from what it does with a value of its type.
func applySignal[T any](do func(workflow.Context, T)) func(workflow.Context, workflow.ReceiveChannel, bool) bool {
	return func(ctx workflow.Context, ch workflow.ReceiveChannel, block bool) bool {
		var v T
		if block {
			ch.Receive(ctx, &v)
		} else if !ch.ReceiveAsync(&v) {
			return false
		}
		do(ctx, v)
		return true
	}
}

// touch restarts the idle clock.
func (w *box) touch(ctx workflow.Context) { w.st.LastActive = workflow.Now(ctx) }

// pin keeps the box awake for s.Ref until it is unpinned; a run's pin also lists the run, which
// the box tells of lease changes.
func (w *box) pin(ctx workflow.Context, s PinSignal) {
	if s.Ref != "" && !slices.Contains(w.st.Pins, s.Ref) {
		w.st.Pins = append(w.st.Pins, s.Ref)
		slices.Sort(w.st.Pins)
	}
	// A run that predates PinSignal.Run is known by its ID.
	if s.Ref != "" && (s.Run || strings.HasPrefix(s.Ref, RunIDPrefix)) && !slices.Contains(w.st.Runs, s.Ref) {
		w.st.Runs = append(w.st.Runs, s.Ref)
		slices.Sort(w.st.Runs)
	}
	w.touch(ctx)
}

// unpin ends s.Ref's pin.
func (w *box) unpin(ctx workflow.Context, s PinSignal) {
	w.st.Pins = slices.DeleteFunc(w.st.Pins, func(r string) bool { return r == s.Ref })
	w.st.Runs = slices.DeleteFunc(w.st.Runs, func(r string) bool { return r == s.Ref })
	w.touch(ctx)
}

// run is the box's own clock: it sleeps until the idle deadline or the lease renewal, whichever
// is first, re-planning whenever a message arrives, and ends on delete or continue-as-new.
func (w *box) run(ctx workflow.Context) error {
	for {
		if w.deleted {
			return w.drain(ctx) // the delete update answers before the workflow completes
		}
		if w.continueSuggested(ctx) {
			if err := w.drain(ctx); err != nil {
				return err
			}
			if !w.deleted {
				return w.continueAsNew(ctx)
			}
			continue
		}
		gen := w.gen
		wake := func() bool { return w.gen != gen || w.deleted || w.continueSuggested(ctx) }
		next := w.nextTimer()
		if next.IsZero() {
			if err := workflow.Await(ctx, wake); err != nil {
				return err
			}
			continue
		}
		fired := false
		if d := next.Sub(workflow.Now(ctx)); d > 0 {
			woke, err := workflow.AwaitWithTimeout(ctx, d, wake)
			if err != nil {
				return err
			}
			fired = !woke
		} else {
			fired = true
		}
		if fired {
			if err := w.onTimer(ctx); err != nil {
				return err
			}
		}
	}
}

// nextTimer is the earliest of the idle deadline, the lease renewal, the expiry of a viewer
// count, the next periodic seal, the idle warning, the control lease's idle deadline and the
// end of a fork checkpoint; zero when none counts.
func (w *box) nextTimer() time.Time {
	next := w.idleDeadline()
	for _, t := range []time.Time{w.renewAt(), w.viewersExpire(), w.sealDue(), w.idleWarnAt(), w.leaseIdleDeadline(), w.forksDue()} {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	return next
}

// versionViewersBySource marks the box workflow's adding up viewer counts by source.
const versionViewersBySource = "viewers-by-source"

// setViewers records a viewer count reported now.
func (w *box) setViewers(ctx workflow.Context, s ViewersSignal) {
	// Histories recorded before sources (by an older worker, whatever the API sent) replace the
	// one count: replaying them must plan the same timers.
	if w.version(ctx, versionViewersBySource, 1) == workflow.DefaultVersion ||
		s.Source == "" {
		w.st.Viewers = max(s.Count, 0)
		return
	}
	// A count without a source never expires, and the older API that sent it may be gone before
	// its last report: the first report with a source ends it.
	w.st.Viewers = 0
	now := workflow.Now(ctx)
	w.st.ViewersBy = slices.DeleteFunc(w.st.ViewersBy, func(r ViewerReport) bool { return r.Source == s.Source })
	if s.Count > 0 {
		w.st.ViewersBy = append(w.st.ViewersBy, ViewerReport{Source: s.Source, Count: s.Count, Control: max(s.Control, 0), At: now})
		slices.SortFunc(w.st.ViewersBy, func(a, b ViewerReport) int { return strings.Compare(a.Source, b.Source) })
	}
}

// viewers is the number of desktop viewers: every source's count.
func (w *box) viewers() int {
	n := w.st.Viewers
	for _, r := range w.st.ViewersBy {
		n += r.Count
	}
	return n
}

// viewersExpire is when the oldest source's count expires; zero when no source reported.
func (w *box) viewersExpire() time.Time {
	var first time.Time
	for _, r := range w.st.ViewersBy {
		if t := r.At.Add(ViewersReportTTL); first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}

// expireViewers drops the counts of sources that have not reported for ViewersReportTTL: the API
// process is gone, and its viewers' connections with it.
func (w *box) expireViewers(now time.Time) {
	w.st.ViewersBy = slices.DeleteFunc(w.st.ViewersBy, func(r ViewerReport) bool {
		return !now.Before(r.At.Add(ViewersReportTTL))
	})
}

// onTimer releases an idle control lease, renews the sandbox lease when due and hibernates the
// box when idle; the last two run as operations under the mutex, like an update.
func (w *box) onTimer(ctx workflow.Context) error {
	now := workflow.Now(ctx)
	w.expireViewers(now)
	w.releaseIdleLease(ctx)
	if r := w.renewAt(); !r.IsZero() && !now.Before(r) {
		if _, err := w.operate(ctx, byTimer, w.renewLocked); err != nil && isCanceled(err) {
			return err
		}
	}
	if d := w.forksDue(); !d.IsZero() && !now.Before(d) {
		if _, err := w.operate(ctx, byTimer, func(ctx workflow.Context) error { w.dropForks(ctx); return nil }); err != nil && isCanceled(err) {
			return err
		}
	}
	if at := w.idleWarnAt(); !at.IsZero() && !now.Before(at) {
		d := w.idleDeadline()
		w.st.IdleWarned = d
		w.event(ctx, "idle_warning", fmt.Sprintf("hibernating at %s, after %s with nothing happening, unless something happens",
			d.UTC().Format(time.RFC3339), w.in.Policy.IdleAfter))
	}
	if d := w.sealDue(); !d.IsZero() && !now.Before(d) {
		_, err := w.operate(ctx, byTimer, func(ctx workflow.Context) error {
			if d := w.sealDue(); !d.IsZero() && !workflow.Now(ctx).Before(d) {
				w.seal(ctx)
			}
			return nil
		})
		if err != nil && isCanceled(err) {
			return err
		}
	}
	if d := w.idleDeadline(); !d.IsZero() && !workflow.Now(ctx).Before(d) {
		_, err := w.operate(ctx, byTimer, func(ctx workflow.Context) error {
			// Busy by this operation alone; anything else arriving meanwhile restarts the clock.
			if d := w.idleDeadlineWith(1); d.IsZero() || workflow.Now(ctx).Before(d) {
				return nil // something happened while waiting for the mutex
			}
			return w.hibernateLocked(ctx, idle)
		})
		if err != nil && isCanceled(err) {
			return err
		}
	}
	return nil
}

// idleDeadline is when the box hibernates if nothing happens: only a running box with no viewer,
// no pin and no pending operation counts down, from its last activity.
func (w *box) idleDeadline() time.Time { return w.idleDeadlineWith(0) }

// idleDeadlineWith is idleDeadline with ownBusy operations (the caller's own) not counted.
func (w *box) idleDeadlineWith(ownBusy int) time.Time {
	if w.in.Policy.IdleAfter <= 0 || w.st.State != cocoonbox.BoxStateRunning ||
		w.viewers() > 0 || len(w.st.Pins) > 0 || w.busy > ownBusy {
		return time.Time{}
	}
	return w.st.LastActive.Add(w.in.Policy.IdleAfter)
}

// idleWarnAt is when to warn of the coming idle hibernate; zero when idle is not counting or
// this deadline was announced.
func (w *box) idleWarnAt() time.Time {
	d := w.idleDeadline()
	if !w.explains || d.IsZero() || w.st.IdleWarned.Equal(d) {
		return time.Time{}
	}
	return d.Add(-min(w.in.Policy.IdleAfter/4, MaxIdleWarning))
}

// renewAt is when to renew the lease, for a box that has a sandbox.
// sandboxLost has the box renew its lease at once when the node that held its sandbox is lost:
// the renewal finds the sandbox gone, as after a reaped lease, so a running box fails naming the
// node and its next use brings it back from its newest snapshot, instead of failing calls until
// its next planned renewal.
func (w *box) sandboxLost(ctx workflow.Context, s SandboxLostSignal) {
	if s.SandboxID == "" || s.SandboxID != w.st.SandboxID {
		return // an earlier sandbox of the box, or none
	}
	w.st.NextRenew = workflow.Now(ctx)
	w.gen++
}

func (w *box) renewAt() time.Time {
	if w.st.SandboxID == "" || w.busy > 0 {
		return time.Time{}
	}
	switch w.st.State {
	case cocoonbox.BoxStateRunning, cocoonbox.BoxStateHibernated:
		return w.st.NextRenew
	}
	return time.Time{}
}

func (w *box) continueSuggested(ctx workflow.Context) bool {
	limit := w.in.OpsBeforeContinue
	if limit <= 0 {
		limit = DefaultOpsBeforeContinue
	}
	return w.ops >= limit || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// drain waits for accepted updates, a running seal and the releases of replaced sandboxes to
// finish, so none is cut off by completion or continue-as-new.
func (w *box) drain(ctx workflow.Context) error {
	return workflow.Await(ctx, func() bool {
		return workflow.AllHandlersFinished(ctx) && w.st.Seal.Running == "" && w.releasing == 0
	})
}

// continueAsNew hands the compact state to a fresh run, after applying signals not yet read.
func (w *box) continueAsNew(ctx workflow.Context) error {
	for _, sig := range w.signals() {
		ch := workflow.GetSignalChannel(ctx, sig.name)
		for sig.apply(ctx, ch, false) {
		}
	}
	next := w.in
	st := w.st
	next.State = &st
	return workflow.NewContinueAsNewError(ctx, BoxWorkflow, next)
}

// status is the query answer.
func (w *box) status() Status {
	return Status{
		BoxID:        w.in.BoxID,
		State:        w.st.State,
		SandboxID:    w.st.SandboxID,
		Deadline:     w.st.Deadline,
		Viewers:      w.viewers(),
		Pins:         slices.Clone(w.st.Pins),
		LastError:    w.st.LastError,
		IdleDeadline: w.idleDeadline(),
		Policy:       w.in.Policy,
		LastSnapshot: w.st.LastSnapshot,
		Controller:   w.st.Controller,
		LeaseSeq:     w.st.LeaseSeq,
		Seal:         w.sealWord(),
		RestoredFrom: w.st.RestoredFrom,
		Start:        w.st.Start,
	}
}

func isCanceled(err error) bool {
	var c *temporal.CanceledError
	return errors.As(err, &c)
}
