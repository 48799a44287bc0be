package workflows

import (
	"cmp"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

var attemptActs *activities.Attempts

// AttemptsWait is how long a judged best-of-N run waits for its user to accept an attempt
// before its forks are discarded.
const AttemptsWait = 7 * 24 * time.Hour

// AttemptsWorkflow is a best-of-N agent run (ID AttemptsWorkflowID): the task runs on each fork
// the front door made of the box, one child AgentRunWorkflow each; then a judge step (a model
// call given the task and each attempt's steps and final screen) picks one; then the run waits
// for its user: accept (the judge's pick or another attempt) gives the box the state of that
// attempt's fork, discard leaves the box as it was; either way every fork is deleted. Each step
// is an activity whose result is recorded, so a worker that dies mid-judge takes nothing twice.
func AttemptsWorkflow(ctx workflow.Context, in AttemptsInput) (AttemptsStatus, error) {
	if in.ID == "" || len(in.Forks) == 0 || len(in.Forks) != len(in.Runs) {
		return AttemptsStatus{}, temporal.NewNonRetryableApplicationError("attempts: an ID and one run per fork are required", activities.ErrTypeInvalidArgument, nil)
	}
	a := &attempts{in: in, st: AttemptsStatus{State: cocoonbox.AttemptsRunning}}
	if err := a.setup(ctx); err != nil {
		return a.st, err
	}
	return a.run(ctx)
}

type attempts struct {
	in      AttemptsInput
	st      AttemptsStatus
	accept  *AcceptInput // the user's answer, once it came
	discard bool
	// refused counts the accepts whose adopt failed: each sends the run back to judged.
	refused int
	// refusal is the error type of the last adopt that failed, the accept's answer.
	refusal string
}

func (a *attempts) setup(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryAttempts, func() (AttemptsStatus, error) { return a.st, nil }); err != nil {
		return err
	}
	waiting := func() error {
		if a.st.State != cocoonbox.AttemptsJudged || a.accept != nil || a.discard {
			return temporal.NewApplicationError("the attempts are "+a.st.State+", not waiting for a choice", ErrTypeInvalidTransition)
		}
		return nil
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateAccept, func(ctx workflow.Context, in AcceptInput) (AttemptsStatus, error) {
		a.accept = &in
		return a.settled(ctx, a.refused)
	}, workflow.UpdateHandlerOptions{Validator: func(in AcceptInput) error {
		if in.Choice < 0 || in.Choice > len(a.in.Forks) {
			return temporal.NewApplicationError(fmt.Sprintf("choice: must be an attempt from 1 to %d, or 0 for the judge's pick", len(a.in.Forks)), activities.ErrTypeInvalidArgument)
		}
		return waiting()
	}}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateDiscard, func(ctx workflow.Context, _ struct{}) (AttemptsStatus, error) {
		a.discard = true
		return a.settled(ctx, a.refused)
	}, workflow.UpdateHandlerOptions{Validator: func(struct{}) error { return waiting() }})
}

// settled waits until the run has acted on the user's answer: it ended, or the accept given
// when refused accepts had been counted failed and the run waits for another answer.
func (a *attempts) settled(ctx workflow.Context, refused int) (AttemptsStatus, error) {
	err := workflow.Await(ctx, func() bool {
		return a.refused > refused || a.st.State == cocoonbox.AttemptsAccepted ||
			a.st.State == cocoonbox.AttemptsDiscarded || a.st.State == cocoonbox.AttemptsFailed
	})
	if a.refused > refused || a.st.State == cocoonbox.AttemptsFailed {
		return a.st, temporal.NewApplicationError(a.st.Error, cmp.Or(a.refusal, ErrTypeInvalidTransition))
	}
	return a.st, err
}

// versionAcceptAgain marks the attempts' going back to judged when an accept's adopt fails,
// keeping their forks for another answer; before it the run ended failed there.
const versionAcceptAgain = "accept-again"

func (a *attempts) run(ctx workflow.Context) (AttemptsStatus, error) {
	futures := make([]workflow.ChildWorkflowFuture, len(a.in.Runs))
	for i, runID := range a.in.Runs {
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID: AgentRunWorkflowID(runID), TaskQueue: TaskQueue,
			ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		})
		futures[i] = workflow.ExecuteChildWorkflow(cctx, AgentRunWorkflow, AgentRunInput{
			RunID: runID, BoxID: a.in.Forks[i], Owner: a.in.Owner, Task: a.in.Task, Model: a.in.Model, MaxSteps: a.in.MaxSteps,
			System: attemptSystem(a.in.System, i+1, len(a.in.Runs)),
		})
	}
	for _, f := range futures {
		_ = f.Get(ctx, nil) // a failed attempt is one the judge does not pick
	}
	a.setState(ctx, cocoonbox.AttemptsJudging, 0, "")
	var verdict activities.JudgeResult
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute, HeartbeatTimeout: sandboxHeartbeatTimeout, RetryPolicy: retryPolicy(),
	}), agentActs.Judge, activities.JudgeInput{ID: a.in.ID}).Get(ctx, &verdict)
	if err != nil {
		a.st.Error = "judge: " + reason(err)
		a.setState(ctx, cocoonbox.AttemptsFailed, 0, a.st.Error)
		a.dropForks(ctx)
		return a.st, nil
	}
	a.st.Winner, a.st.Reason = verdict.Winner, verdict.Reason
	a.st.State = cocoonbox.AttemptsJudged // the judge's activity recorded it
	return a.answered(ctx, workflow.Now(ctx).Add(AttemptsWait))
}

// answered waits until deadline for the user's answer and acts on it. An accept whose adopt
// fails leaves the box as it was and the run judged, its forks kept, for another answer.
func (a *attempts) answered(ctx workflow.Context, deadline time.Time) (AttemptsStatus, error) {
	for {
		if ok, err := workflow.AwaitWithTimeout(ctx, deadline.Sub(workflow.Now(ctx)), func() bool { return a.accept != nil || a.discard }); err != nil {
			return a.st, err
		} else if !ok {
			a.discard = true
		}
		if a.discard {
			a.dropForks(ctx)
			a.setState(ctx, cocoonbox.AttemptsDiscarded, 0, "")
			return a.st, nil
		}
		choice := a.accept.Choice
		if choice == 0 {
			choice = a.st.Winner
		}
		a.setState(ctx, cocoonbox.AttemptsAccepting, choice, "")
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: 10 * time.Minute, HeartbeatTimeout: sandboxHeartbeatTimeout, RetryPolicy: retryPolicy(),
		}), attemptActs.AdoptAttempt, activities.AdoptAttemptInput{ID: a.in.ID, Choice: choice, Try: a.refused}).Get(ctx, nil)
		if err == nil {
			a.dropForks(ctx)
			a.st.Error = ""
			a.setState(ctx, cocoonbox.AttemptsAccepted, choice, "")
			return a.st, nil
		}
		a.st.Error, a.refusal = "accept: "+reason(err), errorType(err)
		if workflow.GetVersion(ctx, versionAcceptAgain, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			a.setState(ctx, cocoonbox.AttemptsFailed, choice, a.st.Error)
			return a.st, nil
		}
		// The box is as it was (a failed adopt changes nothing) and every fork stays.
		a.accept = nil
		a.setState(ctx, cocoonbox.AttemptsJudged, choice, a.st.Error)
		a.refused++
	}
}

// attemptSystem tells the agent of attempt n of total that it is one of several, so attempts
// may go different ways.
func attemptSystem(system string, n, total int) string {
	note := fmt.Sprintf("This is attempt %d of %d at the same task, each on its own copy of this computer; a judge keeps the best.", n, total)
	if system == "" {
		return note
	}
	return system + "\n\n" + note
}

func (a *attempts) setState(ctx workflow.Context, state string, chosen int, why string) {
	a.st.State = state
	if chosen > 0 {
		a.st.Chosen = chosen
	}
	err := workflow.ExecuteLocalActivity(localStoreOptions(ctx), attemptActs.SetAttemptsState,
		activities.AttemptsStateInput{ID: a.in.ID, State: state, Chosen: chosen, Error: why}).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Warn("record the attempts' state", "state", state, "error", err)
	}
}

// dropForks deletes the forks; one that cannot be deleted now stays, logged.
func (a *attempts) dropForks(ctx workflow.Context) {
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute, HeartbeatTimeout: sandboxHeartbeatTimeout, RetryPolicy: retryPolicy(),
	}), attemptActs.DropForks, activities.DropForksInput{ID: a.in.ID}).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Warn("delete the attempts' forks", "error", err)
	}
}
