package workflows

import (
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

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

// takeOver makes in.User the controller.
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
		w.st.Controller = ""
		w.st.LastActive = workflow.Now(ctx)
		w.gen++
		w.tellRuns(ctx, SignalRunHandBack)
	}
	return w.status(), nil
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
	v := workflow.GetVersion(ctx, versionLeaseTellsRuns, workflow.DefaultVersion, 2)
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
