package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

// The desktop's control lease: at most one person drives the box's desktop at a time, and while
// one does, the agent's desktop input waits. The lease is state in the workflow, so every API
// replica and every agent run sees the same holder; it needs no activity and survives
// continue-as-new with the rest of the carried state.

func (w *box) validateTakeOver(in TakeOverInput) error {
	if in.User == "" {
		return temporal.NewApplicationError("takeover: user is required", activities.ErrTypeInvalidArgument)
	}
	if err := w.allowed(UpdateTakeOver); err != nil {
		return err
	}
	if c := w.st.Controller; c != "" && c != in.User && !in.Force {
		return temporal.NewApplicationError("takeover: the desktop is controlled by "+c+"; they must hand back first", ErrTypeInvalidTransition)
	}
	return nil
}

// takeOver makes in.User the controller. Taking the lease, or taking it again, restarts its idle
// clock: the taker has lease_idle to open a control connection.
func (w *box) takeOver(ctx workflow.Context, in TakeOverInput) (Status, error) {
	if err := w.validateTakeOver(in); err != nil {
		return w.status(), err // the lease changed hands since validation
	}
	if w.st.Controller != in.User {
		w.st.Controller = in.User
		w.st.LastActive = workflow.Now(ctx)
		w.gen++
		w.tellRuns(ctx, SignalRunTakeOver)
	}
	if w.leaseIdleCounts(ctx) {
		w.st.ControlSeen = workflow.Now(ctx)
		w.gen++
	}
	return w.status(), nil
}

func (w *box) validateHandBack(in HandBackInput) error {
	if in.User == "" {
		return temporal.NewApplicationError("handback: user is required", activities.ErrTypeInvalidArgument)
	}
	if c := w.st.Controller; c != "" && c != in.User && !in.Force {
		return temporal.NewApplicationError("handback: the desktop is controlled by "+c+", not you", ErrTypeInvalidTransition)
	}
	return nil
}

// handBack ends the lease; handing back a desktop nobody controls is a no-op.
func (w *box) handBack(ctx workflow.Context, in HandBackInput) (Status, error) {
	if err := w.validateHandBack(in); err != nil {
		return w.status(), err
	}
	if w.st.Controller != "" {
		w.endLease(ctx)
	}
	return w.status(), nil
}

// endLease leaves the desktop to the agent and tells the runs waiting for it.
func (w *box) endLease(ctx workflow.Context) {
	w.st.Controller = ""
	w.st.ControlSeen = time.Time{}
	w.st.LastActive = workflow.Now(ctx)
	w.gen++
	w.tellRuns(ctx, SignalRunHandBack)
}

// versionLeaseIdle marks the box workflow's releasing a lease whose holder has no control
// connection open for the policy's LeaseIdle. Histories that predate it never set
// ControlSeen, so they plan no lease timer and replay as they ran.
const versionLeaseIdle = "lease-idle"

// leaseIdleCounts says whether this run releases idle leases; a history that predates that says
// no where it asks.
func (w *box) leaseIdleCounts(ctx workflow.Context) bool {
	return w.version(ctx, versionLeaseIdle, 1) >= 1
}

// leaseIdle is how long a lease without a control connection lasts.
func (w *box) leaseIdle() time.Duration {
	if d := w.in.Policy.LeaseIdle; d > 0 {
		return d
	}
	return DefaultLeaseIdle
}

// reportViewers applies a viewer report: the count, and for the lease whether its holder has a
// control connection open. Control connections need the lease (the edge checks again every few
// seconds), so those open are the holder's, or for those seconds after a forced take-over its
// predecessor's.
func (w *box) reportViewers(ctx workflow.Context, s ViewersSignal) {
	open := w.controls() > 0 // until now
	w.setViewers(ctx, s)
	if w.st.Controller == "" {
		return
	}
	// A lease taken before its idle clock existed starts counting at the first report after.
	first := w.st.ControlSeen.IsZero()
	if first && !w.leaseIdleCounts(ctx) {
		return
	}
	if first || open || w.controls() > 0 {
		w.st.ControlSeen = workflow.Now(ctx)
	}
}

// controls is the number of open control connections: every source's count.
func (w *box) controls() int {
	n := 0
	for _, r := range w.st.ViewersBy {
		n += r.Control
	}
	return n
}

// leaseIdleDeadline is when the box releases the lease if nothing happens: zero while nobody holds
// it, a control connection is open, or the clock does not count (see ControlSeen).
func (w *box) leaseIdleDeadline() time.Time {
	if w.st.Controller == "" || w.st.ControlSeen.IsZero() || w.controls() > 0 ||
		w.st.State == cocoonbox.BoxStateDeleted {
		return time.Time{}
	}
	return w.st.ControlSeen.Add(w.leaseIdle())
}

// releaseIdleLease ends a lease past its idle deadline, recording why, so the runs waiting for the
// desktop go on rather than wait out MaxRunWait for a person who left.
func (w *box) releaseIdleLease(ctx workflow.Context) {
	d := w.leaseIdleDeadline()
	if d.IsZero() || workflow.Now(ctx).Before(d) {
		return
	}
	who := w.st.Controller
	w.endLease(ctx)
	w.event(ctx, "lease_released", fmt.Sprintf("idle: %s had no control connection for %s", who, w.leaseIdle()))
}

// versionLeaseTellsRuns marks the box workflow's telling pinning runs of lease changes: version 1
// told them on two channels (SignalRunTakeOver, SignalRunHandBack), version 2 on one
// (SignalRunLease), which keeps the order of the changes without the runs sorting them.
const versionLeaseTellsRuns = "lease-tells-runs"

// tellRuns tells every agent run pinning the box that the lease changed hands, so a run waits
// while a person drives and looks again when they hand back. legacy is the signal version 1 sent
// for this change. The update does not wait for the signals: a run that ended meanwhile is not an
// error of the lease.
func (w *box) tellRuns(ctx workflow.Context, legacy string) {
	v := w.version(ctx, versionLeaseTellsRuns, 2)
	if v == workflow.DefaultVersion {
		return // histories that predate it: replaying them must not add commands
	}
	name := SignalRunLease
	if v == 1 {
		name = legacy
	}
	w.st.LeaseSeq++
	for _, ref := range w.st.Runs {
		f := workflow.SignalExternalWorkflow(ctx, AgentRunWorkflowID(ref), "", name, RunLeaseSignal{Controller: w.st.Controller, Seq: w.st.LeaseSeq})
		workflow.Go(ctx, func(ctx workflow.Context) {
			if err := f.Get(ctx, nil); err != nil {
				workflow.GetLogger(ctx).Info("tell run of lease change", "run", ref, "controller", w.st.Controller, "error", err)
			}
		})
	}
}

// validateControlConn checks a request for the control slot before it reaches history.
func (w *box) validateControlConn(in ControlConnInput) error {
	if in.ID == "" || in.Source == "" {
		return temporal.NewApplicationError("control connection: id and source are required", activities.ErrTypeInvalidArgument)
	}
	return w.allowed(UpdateControlConn)
}

// controlConn gives connection in.ID the desktop's control slot, or refuses while another
// connection holds it. The slot is here rather than in an API process, so a second control
// connection is refused whichever replica it reaches. A holder whose API process stopped
// reporting viewers (it died with its connections) lets go when its reports expire.
func (w *box) controlConn(ctx workflow.Context, in ControlConnInput) (Status, error) {
	if err := w.validateControlConn(in); err != nil {
		return w.status(), err
	}
	now := workflow.Now(ctx)
	if c := w.st.ControlConn; c.ID != "" && c.ID != in.ID && w.controlHeld(now) {
		return w.status(), temporal.NewApplicationError("the desktop already has a controller connection", ErrTypeInvalidTransition)
	}
	w.st.ControlConn = ControlConn{ID: in.ID, Source: in.Source, At: now}
	return w.status(), nil
}

// controlHeld says whether the slot's holder is alive at now: it took the slot within a report's
// lifetime, or its API process has reported a control connection since.
func (w *box) controlHeld(now time.Time) bool {
	c := w.st.ControlConn
	if now.Before(c.At.Add(ViewersReportTTL)) {
		return true
	}
	for _, r := range w.st.ViewersBy {
		if r.Source == c.Source && r.Control > 0 && now.Before(r.At.Add(ViewersReportTTL)) {
			return true
		}
	}
	return false
}

// controlClosed frees the slot when connection s.ID holds it.
func (w *box) controlClosed(_ workflow.Context, s ControlClosedSignal) {
	if s.ID != "" && w.st.ControlConn.ID == s.ID {
		w.st.ControlConn = ControlConn{}
	}
}
