package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

var (
	agentActs *activities.Agent
	recActs   *activities.Recorder
)

// ErrTypeRunFailed is the ApplicationError type an agent run fails with; its message is the
// reason a person reads (the model's refusal, the step limit, a box that is gone).
const ErrTypeRunFailed = "RunFailed"

// AgentRunWorkflow drives a box's resident agent through a task (ID AgentRunWorkflowID): it pins
// the box awake, runs one activity per step until the model is done, MaxSteps is reached or a
// cancel signal arrives, passes queued message signals into the next step, and records the run's
// end. The box is woken by each step's activity (the box workflow's wake update, a no-op when it
// runs), which also covers a box that hibernated or lost its sandbox mid-run. The conversation
// never enters a payload: each step's activity loads the previous step's from the store.
//
// A run that succeeds or is cancelled completes with its result; a failed run fails with
// ErrTypeRunFailed and the reason.
func AgentRunWorkflow(ctx workflow.Context, in AgentRunInput) (AgentRunResult, error) {
	if err := validateRun(in); err != nil {
		return AgentRunResult{}, temporal.NewNonRetryableApplicationError(err.Error(), activities.ErrTypeInvalidArgument, err)
	}
	r := &agentRun{in: in}
	if r.in.MaxSteps <= 0 {
		r.in.MaxSteps = DefaultAgentMaxSteps
	}
	r.setup(ctx)
	return r.run(ctx)
}

func validateRun(in AgentRunInput) error {
	switch {
	case in.RunID == "":
		return cocoonbox.Invalid("run_id", "is required")
	case strings.TrimSpace(in.Task) == "":
		return cocoonbox.Invalid("task", "is required")
	case in.Model == "":
		return cocoonbox.Invalid("model", "is required")
	}
	return in.BoxID.Validate()
}

// agentRun is one run's state.
type agentRun struct {
	in         AgentRunInput
	queue      []string // messages for the next step
	cancelled  bool
	cancelStep workflow.CancelFunc // cancels the step in flight; nil between steps
	steps      int
	text       string
	// controller holds the desktop's control lease as the box workflow last told it ("" for
	// nobody); leaseSeq counts those words, so a step's older view never overrides a newer one.
	controller string
	leaseSeq   int
	boxSeq     int64 // the box's LeaseSeq of the last lease signal applied
	look       bool  // a person handed the desktop back: the next step starts from a screenshot
	stepCut    bool  // the run was cancelled with a step in flight
}

// setup registers the signals.
func (r *agentRun) setup(ctx workflow.Context) {
	msgs := workflow.GetSignalChannel(ctx, SignalRunMessage)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var m RunMessageSignal
			msgs.Receive(ctx, &m)
			if t := strings.TrimSpace(m.Text); t != "" {
				r.queue = append(r.queue, t)
			}
		}
	})
	apply := func(ctx workflow.Context, l RunLeaseSignal) {
		r.boxSeq = l.Seq
		r.controller, r.look = l.Controller, r.look || l.Controller == ""
		r.leaseSeq++
		if r.cancelStep != nil {
			r.tellAgent(ctx) // a step runs: its desktop actions stop (or go on) now
		}
	}
	leases := workflow.GetSignalChannel(ctx, SignalRunLease)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var l RunLeaseSignal
			leases.Receive(ctx, &l)
			apply(ctx, l) // one channel: the changes come in the order the box made them
		}
	})
	// Box workflows recorded before SignalRunLease tell on two channels, read in no particular
	// order within a workflow task: the box's sequence puts them back in order.
	for _, name := range []string{SignalRunTakeOver, SignalRunHandBack} {
		ch := workflow.GetSignalChannel(ctx, name)
		workflow.Go(ctx, func(ctx workflow.Context) {
			for {
				var l RunLeaseSignal
				ch.Receive(ctx, &l)
				if l.Seq == 0 || l.Seq > r.boxSeq {
					apply(ctx, l)
				}
			}
		})
	}
	cancels := workflow.GetSignalChannel(ctx, SignalRunCancel)
	workflow.Go(ctx, func(ctx workflow.Context) {
		var c RunCancelSignal
		cancels.Receive(ctx, &c)
		r.cancelled = true
		if r.cancelStep != nil {
			r.cancelStep()
		}
	})
}

// run is the script: pin, step until an end, record the end, unpin.
func (r *agentRun) run(ctx workflow.Context) (AgentRunResult, error) {
	box := BoxWorkflowID(r.in.BoxID)
	stopRecording := r.record(ctx)
	state, reason := r.loop(ctx, box)
	stopRecording()
	if errors.Is(ctx.Err(), workflow.ErrCanceled) {
		state, reason = cocoonbox.AgentRunCancelled, "" // the workflow itself was cancelled
	}
	// Cleanup runs even when the workflow is cancelled.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if r.stepCut {
		// The step runs on in the box without its activity: stop it there.
		if err := workflow.ExecuteActivity(cancelStepOptions(dctx), agentActs.CancelStep, activities.CancelStepInput{
			RunID: r.in.RunID, BoxID: r.in.BoxID,
		}).Get(dctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("stop the cancelled step in the box", "error", err)
		}
	}
	r.setState(dctx, state, reason)
	if err := workflow.SignalExternalWorkflow(dctx, box, "", SignalUnpin, PinSignal{Ref: r.in.RunID}).Get(dctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("unpin box", "error", err)
	}
	res := AgentRunResult{State: state, Steps: r.steps, Text: r.text}
	switch {
	case ctx.Err() != nil:
		return res, ctx.Err()
	case state == cocoonbox.AgentRunFailed:
		return res, temporal.NewNonRetryableApplicationError(reason, ErrTypeRunFailed, nil)
	}
	return res, nil
}

// record starts recording the box's desktop when the run asks for it, and returns what stops it
// and waits for its last chunk.
func (r *agentRun) record(ctx workflow.Context) (stop func()) {
	if !r.in.Record {
		return func() {}
	}
	rctx, cancel := workflow.WithCancel(ctx)
	f := workflow.ExecuteActivity(workflow.WithActivityOptions(rctx, workflow.ActivityOptions{
		StartToCloseTimeout: 24 * time.Hour, HeartbeatTimeout: 30 * time.Second, WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, NonRetryableErrorTypes: activities.NonRetryableErrorTypes()},
	}), recActs.RecordDesktop, activities.RecordInput{RunID: r.in.RunID, BoxID: r.in.BoxID})
	return func() {
		cancel()
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		if err := f.Get(dctx, nil); err != nil && !temporal.IsCanceledError(err) {
			workflow.GetLogger(ctx).Warn("recording of the run", "error", err)
		}
	}
}

// loop pins the box and runs steps; it answers the run's final state and, for failed, why.
func (r *agentRun) loop(ctx workflow.Context, box string) (cocoonbox.AgentRunState, string) {
	if err := workflow.SignalExternalWorkflow(ctx, box, "", SignalPin, PinSignal{Ref: r.in.RunID, Run: true}).Get(ctx, nil); err != nil {
		return cocoonbox.AgentRunFailed, fmt.Sprintf("pin box %s: %v", r.in.BoxID, err)
	}
	for step := 1; ; step++ {
		if r.cancelled || ctx.Err() != nil {
			return cocoonbox.AgentRunCancelled, ""
		}
		if step > r.in.MaxSteps {
			return cocoonbox.AgentRunFailed, fmt.Sprintf("stopped after %d steps without finishing", r.in.MaxSteps)
		}
		msg := strings.Join(r.queue, "\n\n")
		look := r.look
		r.queue, r.look = nil, false
		seq := r.leaseSeq
		sctx, cancel := workflow.WithCancel(ctx)
		r.cancelStep = cancel
		var res activities.StepResult
		err := workflow.ExecuteActivity(stepOptions(sctx), agentActs.Step, activities.StepInput{
			RunID: r.in.RunID, BoxID: r.in.BoxID, Owner: r.in.Owner, Step: step, Model: r.in.Model,
			System: r.in.System, Task: r.in.Task, Message: msg, FreshScreenshot: look,
		}).Get(sctx, &res)
		r.cancelStep = nil
		cancel()
		if r.cancelled || ctx.Err() != nil {
			r.stepCut = err != nil // cancelled in flight, not after it finished
			return cocoonbox.AgentRunCancelled, ""
		}
		if err != nil {
			return cocoonbox.AgentRunFailed, failure(err)
		}
		r.steps, r.text = step, res.Text
		if res.Question != "" {
			if state, reason, ended := r.ask(ctx, box, res.Question); ended {
				return state, reason
			}
			continue
		}
		if res.Done && len(r.queue) == 0 { // a message that came during the last step gets a turn
			return cocoonbox.AgentRunSucceeded, ""
		}
		if r.leaseSeq == seq && res.Controller != "" {
			r.controller = res.Controller // a lease taken before the run pinned the box
		}
		if res.DesktopRefused && r.controller != "" {
			if state, reason, ended := r.wait(ctx); ended {
				return state, reason
			}
		}
	}
}

// wait holds the run in the waiting state while a person drives the desktop: the model wanted
// the desktop and spending steps on refusals would only burn them. After the hand-back the run goes
// on (ended false) from a fresh screenshot; a cancel ends it, and so does a person holding the
// desktop for longer than MaxRunWait, since the waiting run keeps the box pinned awake.
func (r *agentRun) wait(ctx workflow.Context) (state cocoonbox.AgentRunState, reason string, ended bool) {
	r.setState(ctx, cocoonbox.AgentRunWaiting, "a person holds the desktop ("+r.controller+"); the run goes on when they hand it back")
	handedBack, _ := workflow.AwaitWithTimeout(ctx, MaxRunWait, func() bool { return r.controller == "" || r.cancelled })
	switch {
	case r.cancelled || ctx.Err() != nil:
		return cocoonbox.AgentRunCancelled, "", true
	case !handedBack:
		return cocoonbox.AgentRunFailed, fmt.Sprintf("%s held the desktop for more than %v; start the run again when it is free", r.controller, MaxRunWait), true
	}
	r.look = true
	r.setState(ctx, cocoonbox.AgentRunRunning, "")
	return "", "", false
}

// MaxAnswerWait bounds how long a run waits for the answer to its agent's question. The box may
// sleep meanwhile, so the wait costs no machine, only the run's place among its starter's runs.
const MaxAnswerWait = 7 * 24 * time.Hour

// ask holds the run in waiting_for_user until its starter answers the agent's question (any
// message: SendMessage, `cocoonbox agent say`, MCP agent_message), which the next step carries to
// the model as the question's result. The box is unpinned meanwhile, so it hibernates after its
// idle period; the next step's wake brings it back. A cancel ends the wait, and so does
// MaxAnswerWait without an answer.
func (r *agentRun) ask(ctx workflow.Context, box, question string) (state cocoonbox.AgentRunState, reason string, ended bool) {
	r.setState(ctx, cocoonbox.AgentRunWaitingForUser, question)
	if err := workflow.SignalExternalWorkflow(ctx, box, "", SignalUnpin, PinSignal{Ref: r.in.RunID}).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("unpin the box while the run waits for an answer", "error", err)
	}
	answered, _ := workflow.AwaitWithTimeout(ctx, MaxAnswerWait, func() bool { return len(r.queue) > 0 || r.cancelled })
	switch {
	case r.cancelled || ctx.Err() != nil:
		return cocoonbox.AgentRunCancelled, "", true
	case !answered:
		return cocoonbox.AgentRunFailed, fmt.Sprintf("nobody answered the agent's question within %v: %s", MaxAnswerWait, question), true
	}
	if err := workflow.SignalExternalWorkflow(ctx, box, "", SignalPin, PinSignal{Ref: r.in.RunID, Run: true}).Get(ctx, nil); err != nil {
		return cocoonbox.AgentRunFailed, fmt.Sprintf("pin box %s again after the answer: %v", r.in.BoxID, err), true
	}
	r.setState(ctx, cocoonbox.AgentRunRunning, "")
	return "", "", false
}

// tellAgent tells the box's agent whether a person holds the desktop now. Best effort: the next
// step's request carries the lease anyway.
func (r *agentRun) tellAgent(ctx workflow.Context) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: time.Minute,
	})
	err := workflow.ExecuteActivity(ctx, agentActs.SetDesktopLease, activities.DesktopLeaseInput{
		BoxID: r.in.BoxID, Held: r.controller != "", Seq: r.boxSeq,
	}).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Warn("tell the agent of the lease", "held", r.controller != "", "error", err)
	}
}

// setState records a state the run passes through; a failure to record it is logged, not fatal.
func (r *agentRun) setState(ctx workflow.Context, state cocoonbox.AgentRunState, reason string) {
	if err := workflow.ExecuteActivity(runStateOptions(ctx), agentActs.SetRunState, activities.RunStateInput{
		RunID: r.in.RunID, State: state, Reason: reason,
	}).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("record run state", "state", state, "error", err)
	}
}

// failure is the reason a person reads for a step that failed: the activity's own message.
func failure(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message()
	}
	return err.Error()
}

// stepTimeout bounds one step: the agent's own limit (agentvm.DefaultStepTimeout, 30 minutes)
// plus room for the wake and the relay.
const stepTimeout = 35 * time.Minute

// stepTries bounds the tries of one step whose failures another try may change (its box
// unreachable, the model overloaded): with the back-off of retryPolicy, about eight minutes. A
// box whose node died comes back on another node only once the heartbeats mark the node lost
// (node_dead_after, a minute by default and at most config.MaxNodeDeadAfter, five); the ten
// tries of other activities, about two and a half minutes, would run out first where it is set
// above about two.
const stepTries = 20

func stepOptions(ctx workflow.Context) workflow.Context {
	retry := retryPolicy()
	retry.MaximumAttempts = stepTries
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: stepTimeout,
		HeartbeatTimeout:    sandboxHeartbeatTimeout,
		RetryPolicy:         retry,
	})
}

func runStateOptions(ctx workflow.Context) workflow.Context { return storeOptions(ctx) }

// cancelStepOptions: stopping a cancelled step is retried with back-off for a few minutes (a box
// briefly unreachable); past that, the step ends at the agent's own step timeout.
func cancelStepOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: 5 * time.Minute,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
	})
}
