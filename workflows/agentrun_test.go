package workflows

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

var agentAct = &activities.Agent{}

func testRun() AgentRunInput {
	return AgentRunInput{RunID: "run_1", BoxID: testBox, Owner: "usr_a", Task: "open the site",
		Model: "m", MaxSteps: 10}
}

// runEnv is a test environment for agent runs, recording the pins and the states written.
type runEnv struct {
	*testsuite.TestWorkflowEnvironment
	mu     sync.Mutex
	pins   []string // "pin" and "unpin", in order
	states []activities.RunStateInput
	inputs []activities.StepInput
	cuts   int    // CancelStep calls
	told   []bool // SetDesktopLease calls
}

func newRunEnv(t *testing.T) *runEnv {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(testLogger(t))
	e := &runEnv{TestWorkflowEnvironment: s.NewTestWorkflowEnvironment()}
	e.RegisterWorkflow(AgentRunWorkflow)
	e.RegisterActivity(agentAct)
	for name, sig := range map[string]PinSignal{SignalPin: {Ref: "run_1", Run: true}, SignalUnpin: {Ref: "run_1"}} {
		e.OnSignalExternalWorkflow(mock.Anything, BoxWorkflowID(testBox), "", name, sig).Return(
			func(string, string, string, string, any) error {
				e.mu.Lock()
				defer e.mu.Unlock()
				e.pins = append(e.pins, name)
				return nil
			})
	}
	e.OnActivity(agentAct.CancelStep, mock.Anything, activities.CancelStepInput{RunID: "run_1", BoxID: testBox}).Return(
		func(context.Context, activities.CancelStepInput) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.cuts++
			return nil
		}).Maybe()
	e.OnActivity(agentAct.SetDesktopLease, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.DesktopLeaseInput) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.told = append(e.told, in.Held)
			return nil
		}).Maybe()
	e.OnActivity(agentAct.SetRunState, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.RunStateInput) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.states = append(e.states, in)
			return nil
		})
	return e
}

// onStep answers steps with answer(input), recording the inputs.
func (e *runEnv) onStep(answer func(activities.StepInput) (activities.StepResult, error)) {
	e.onSlowStep(0, answer)
}

// onSlowStep is onStep with each step taking d.
func (e *runEnv) onSlowStep(d time.Duration, answer func(activities.StepInput) (activities.StepResult, error)) {
	e.OnActivity(agentAct.Step, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.StepInput) (activities.StepResult, error) {
			e.mu.Lock()
			e.inputs = append(e.inputs, in)
			e.mu.Unlock()
			return answer(in)
		}).After(d)
}

func (e *runEnv) finalState(t *testing.T) activities.RunStateInput {
	t.Helper()
	require.Len(t, e.states, 1)
	require.Equal(t, []string{SignalPin, SignalUnpin}, e.pins)
	return e.states[0]
}

func TestAgentRunToDone(t *testing.T) {
	e := newRunEnv(t)
	e.onStep(func(in activities.StepInput) (activities.StepResult, error) {
		return activities.StepResult{Done: in.Step == 3, Text: "said " + string(rune('0'+in.Step))}, nil
	})
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.True(t, e.IsWorkflowCompleted())
	require.NoError(t, e.GetWorkflowError())
	var res AgentRunResult
	require.NoError(t, e.GetWorkflowResult(&res))
	require.Equal(t, AgentRunResult{State: cocoonbox.AgentRunSucceeded, Steps: 3, Text: "said 3"}, res)
	require.Len(t, e.inputs, 3)
	for i, in := range e.inputs {
		require.Equal(t, i+1, in.Step)
		require.Equal(t, "usr_a", in.Owner) // checked against the run's row; the gateway is the worker's
		require.Equal(t, "open the site", in.Task)
	}
	require.Equal(t, cocoonbox.AgentRunSucceeded, e.finalState(t).State)
}

func TestAgentRunCancelStopsWithinAStep(t *testing.T) {
	e := newRunEnv(t)
	e.onSlowStep(time.Minute, func(in activities.StepInput) (activities.StepResult, error) {
		return activities.StepResult{}, nil // never done
	})
	e.RegisterDelayedCallback(func() { e.SignalWorkflow(SignalRunCancel, RunCancelSignal{By: "usr_a"}) }, 90*time.Second)
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.True(t, e.IsWorkflowCompleted())
	require.NoError(t, e.GetWorkflowError())
	var res AgentRunResult
	require.NoError(t, e.GetWorkflowResult(&res))
	require.Equal(t, cocoonbox.AgentRunCancelled, res.State)
	require.LessOrEqual(t, len(e.inputs), 2) // the step in flight when the signal came is the last
	require.Equal(t, cocoonbox.AgentRunCancelled, e.finalState(t).State)
	require.Equal(t, 1, e.cuts, "the step in flight is stopped in the box")
}

func TestAgentRunMessageReachesNextStep(t *testing.T) {
	e := newRunEnv(t)
	e.onSlowStep(time.Minute, func(in activities.StepInput) (activities.StepResult, error) {
		return activities.StepResult{Done: in.Step == 2}, nil
	})
	e.RegisterDelayedCallback(func() { e.SignalWorkflow(SignalRunMessage, RunMessageSignal{Text: "use firefox"}) }, 30*time.Second)
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.NoError(t, e.GetWorkflowError())
	require.Len(t, e.inputs, 2)
	require.Equal(t, "", e.inputs[0].Message)
	require.Equal(t, "use firefox", e.inputs[1].Message)
}

func TestAgentRunMessageAfterDoneGetsATurn(t *testing.T) {
	e := newRunEnv(t)
	e.onSlowStep(time.Minute, func(in activities.StepInput) (activities.StepResult, error) {
		return activities.StepResult{Done: true}, nil
	})
	e.RegisterDelayedCallback(func() { e.SignalWorkflow(SignalRunMessage, RunMessageSignal{Text: "one more"}) }, 30*time.Second)
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.NoError(t, e.GetWorkflowError())
	require.Len(t, e.inputs, 2)
	require.Equal(t, "one more", e.inputs[1].Message)
}

func TestAgentRunModelErrorFails(t *testing.T) {
	e := newRunEnv(t)
	e.onStep(func(in activities.StepInput) (activities.StepResult, error) {
		return activities.StepResult{}, temporal.NewNonRetryableApplicationError(
			"model: 400 unknown model m", activities.ErrTypeInvalidArgument, nil)
	})
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.True(t, e.IsWorkflowCompleted())
	err := e.GetWorkflowError()
	var app *temporal.ApplicationError
	require.True(t, errors.As(err, &app), "%v", err)
	require.Equal(t, ErrTypeRunFailed, app.Type())
	require.Contains(t, app.Message(), "unknown model m")
	require.Len(t, e.inputs, 1) // not retried
	st := e.finalState(t)
	require.Equal(t, cocoonbox.AgentRunFailed, st.State)
	require.Contains(t, st.Reason, "unknown model m")
}

func TestAgentRunRetriesAStep(t *testing.T) {
	e := newRunEnv(t)
	failed := false
	e.onStep(func(in activities.StepInput) (activities.StepResult, error) {
		if in.Step == 2 && !failed {
			failed = true
			return activities.StepResult{}, temporal.NewApplicationError("agent: Unavailable", activities.ErrTypeUnavailable)
		}
		return activities.StepResult{Done: in.Step == 2}, nil
	})
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.NoError(t, e.GetWorkflowError())
	// The retry is the same run and step, which the agent answers from its journal if it had run.
	require.Len(t, e.inputs, 3)
	require.Equal(t, []int{1, 2, 2}, []int{e.inputs[0].Step, e.inputs[1].Step, e.inputs[2].Step})
	require.Equal(t, e.inputs[1], e.inputs[2])
}

// TestAgentRunOutlastsALostNode: a step whose box stays unreachable for longer than other
// activities' tries last (its node is marked lost only after node_dead_after, and then rebuilt
// elsewhere) is tried until the box answers, and the run goes on; tries have a bound still.
func TestAgentRunOutlastsALostNode(t *testing.T) {
	for _, c := range []struct {
		failures int
		ok       bool
	}{{failures: 15, ok: true}, {failures: stepTries, ok: false}} {
		e := newRunEnv(t)
		failed := 0
		e.onStep(func(in activities.StepInput) (activities.StepResult, error) {
			if failed < c.failures {
				failed++
				return activities.StepResult{}, temporal.NewApplicationError("box bx_1 is unreachable: node node-b does not answer", activities.ErrTypeUnavailable)
			}
			return activities.StepResult{Done: true}, nil
		})
		e.ExecuteWorkflow(AgentRunWorkflow, testRun())
		if c.ok {
			require.NoError(t, e.GetWorkflowError(), "after %d failed tries", c.failures)
			require.Equal(t, cocoonbox.AgentRunSucceeded, e.finalState(t).State)
		} else {
			require.Error(t, e.GetWorkflowError(), "after %d failed tries", c.failures)
			require.Equal(t, cocoonbox.AgentRunFailed, e.finalState(t).State)
		}
	}
}

func TestAgentRunStepLimit(t *testing.T) {
	e := newRunEnv(t)
	e.onStep(func(activities.StepInput) (activities.StepResult, error) { return activities.StepResult{}, nil })
	in := testRun()
	in.MaxSteps = 2
	e.ExecuteWorkflow(AgentRunWorkflow, in)
	require.Error(t, e.GetWorkflowError())
	require.Len(t, e.inputs, 2)
	require.Equal(t, cocoonbox.AgentRunFailed, e.finalState(t).State)
}

func TestAgentRunValidates(t *testing.T) {
	for _, mut := range []func(*AgentRunInput){
		func(in *AgentRunInput) { in.Task = " " },
		func(in *AgentRunInput) { in.Model = "" },
		func(in *AgentRunInput) { in.BoxID = "nope" },
	} {
		var s testsuite.WorkflowTestSuite
		env := s.NewTestWorkflowEnvironment()
		env.RegisterWorkflow(AgentRunWorkflow)
		in := testRun()
		mut(&in)
		env.ExecuteWorkflow(AgentRunWorkflow, in)
		var app *temporal.ApplicationError
		require.True(t, errors.As(env.GetWorkflowError(), &app))
		require.Equal(t, activities.ErrTypeInvalidArgument, app.Type())
	}
}

// TestAgentRunWaitsWhileAPersonDrives: a step whose desktop action was refused because a person
// holds the lease puts the run in waiting, with no step spent, until the hand-back; the next step
// starts from a fresh screenshot.
func TestAgentRunWaitsWhileAPersonDrives(t *testing.T) {
	e := newRunEnv(t)
	e.onStep(func(in activities.StepInput) (activities.StepResult, error) {
		if in.Step == 1 {
			return activities.StepResult{DesktopRefused: true, Controller: "usr_b"}, nil
		}
		return activities.StepResult{Done: true, Text: "done"}, nil
	})
	var during int
	e.RegisterDelayedCallback(func() {
		e.mu.Lock()
		during = len(e.inputs)
		e.mu.Unlock()
		e.SignalWorkflow(SignalRunLease, RunLeaseSignal{})
	}, 30*time.Minute)
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.True(t, e.IsWorkflowCompleted())
	require.NoError(t, e.GetWorkflowError())
	require.Equal(t, 1, during, "no step ran while the person drove")
	require.Len(t, e.inputs, 2)
	require.False(t, e.inputs[0].FreshScreenshot)
	require.True(t, e.inputs[1].FreshScreenshot, "the step after hand-back looks first")
	var states []cocoonbox.AgentRunState
	for _, s := range e.states {
		states = append(states, s.State)
	}
	require.Equal(t, []cocoonbox.AgentRunState{cocoonbox.AgentRunWaiting, cocoonbox.AgentRunRunning, cocoonbox.AgentRunSucceeded}, states)
	require.Contains(t, e.states[0].Reason, "usr_b")
}

// TestAgentRunLeaseSignals: a takeover signal during a step makes a refused step wait even when
// the step saw nobody in control; a step that needs no desktop does not wait; cancel ends a wait.
func TestAgentRunLeaseSignals(t *testing.T) {
	e := newRunEnv(t)
	e.onSlowStep(time.Minute, func(in activities.StepInput) (activities.StepResult, error) {
		switch in.Step {
		case 1:
			return activities.StepResult{}, nil // the shell: no desktop, no wait
		default:
			return activities.StepResult{DesktopRefused: true}, nil
		}
	})
	e.RegisterDelayedCallback(func() { e.SignalWorkflow(SignalRunLease, RunLeaseSignal{Controller: "usr_b", Seq: 1}) }, 30*time.Second)
	e.RegisterDelayedCallback(func() { e.SignalWorkflow(SignalRunCancel, RunCancelSignal{By: "usr_a"}) }, 50*time.Minute)
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.True(t, e.IsWorkflowCompleted())
	require.NoError(t, e.GetWorkflowError())
	var res AgentRunResult
	require.NoError(t, e.GetWorkflowResult(&res))
	require.Equal(t, cocoonbox.AgentRunCancelled, res.State)
	require.Len(t, e.inputs, 2, "the run waited after step 2 instead of spending steps")
	require.Equal(t, []bool{true}, e.told, "the take-over during step 1 reached the box's agent")
	require.Equal(t, cocoonbox.AgentRunWaiting, e.states[0].State)
	require.Equal(t, cocoonbox.AgentRunCancelled, e.states[len(e.states)-1].State)
}

// TestAgentRunStopsWaitingAfterMaxRunWait: a person who takes the desktop and never hands it back
// does not keep the run, and the box it pins, waiting for ever.
func TestAgentRunStopsWaitingAfterMaxRunWait(t *testing.T) {
	e := newRunEnv(t)
	e.onStep(func(in activities.StepInput) (activities.StepResult, error) {
		return activities.StepResult{DesktopRefused: true, Controller: "usr_b"}, nil
	})
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.True(t, e.IsWorkflowCompleted())
	require.ErrorContains(t, e.GetWorkflowError(), "usr_b held the desktop for more than 1h0m0s")
	require.Len(t, e.inputs, 1)
	last := e.states[len(e.states)-1]
	require.Equal(t, cocoonbox.AgentRunFailed, last.State)
	require.Equal(t, []string{SignalPin, SignalUnpin}, e.pins, "the box is unpinned")
}

// TestAgentRunAppliesLeaseSignalsInOrder: a hand-back and a newer take-over sent together come in
// the box's order on the one lease channel, so the run that goes on after the hand-back waits
// again for the new holder when its step is refused.
func TestAgentRunAppliesLeaseSignalsInOrder(t *testing.T) {
	e := newRunEnv(t)
	e.onStep(func(in activities.StepInput) (activities.StepResult, error) {
		switch in.Step {
		case 1:
			return activities.StepResult{DesktopRefused: true, Controller: "usr_b"}, nil
		case 2:
			return activities.StepResult{DesktopRefused: true}, nil
		}
		return activities.StepResult{Done: true}, nil
	})
	e.RegisterDelayedCallback(func() {
		e.SignalWorkflow(SignalRunLease, RunLeaseSignal{Seq: 2})
		e.SignalWorkflow(SignalRunLease, RunLeaseSignal{Controller: "usr_c", Seq: 3})
	}, time.Minute)
	e.RegisterDelayedCallback(func() { e.SignalWorkflow(SignalRunLease, RunLeaseSignal{Seq: 4}) }, 10*time.Minute)
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.True(t, e.IsWorkflowCompleted())
	require.NoError(t, e.GetWorkflowError())
	var waits []string
	for _, s := range e.states {
		if s.State == cocoonbox.AgentRunWaiting {
			waits = append(waits, s.Reason)
		}
	}
	require.Len(t, waits, 2, "states %v", e.states)
	require.Contains(t, waits[1], "usr_c", "the second wait is for the newer holder")
	require.Len(t, e.inputs, 3)
}

// TestAgentRunOrdersLegacyLeaseSignals: a box workflow recorded before the one lease signal tells
// on two channels, and the run puts a hand-back and a newer take-over delivered together back in
// order by the box's sequence, whichever channel is read first.
func TestAgentRunOrdersLegacyLeaseSignals(t *testing.T) {
	e := newRunEnv(t)
	e.onStep(func(in activities.StepInput) (activities.StepResult, error) {
		if in.Step == 1 {
			return activities.StepResult{DesktopRefused: true, Controller: "usr_b"}, nil
		}
		return activities.StepResult{Done: true}, nil
	})
	e.RegisterDelayedCallback(func() {
		// usr_b hands back (seq 2) and usr_c takes over (seq 3); the take-over's channel is
		// read first.
		e.SignalWorkflow(SignalRunTakeOver, RunLeaseSignal{Controller: "usr_c", Seq: 3})
		e.SignalWorkflow(SignalRunHandBack, RunLeaseSignal{Seq: 2})
	}, time.Minute)
	e.RegisterDelayedCallback(func() { e.SignalWorkflow(SignalRunHandBack, RunLeaseSignal{Seq: 4}) }, 10*time.Minute)
	var during int
	e.RegisterDelayedCallback(func() {
		e.mu.Lock()
		during = len(e.inputs)
		e.mu.Unlock()
	}, 5*time.Minute)
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.True(t, e.IsWorkflowCompleted())
	require.NoError(t, e.GetWorkflowError())
	require.Equal(t, 1, during, "the run still waited for usr_c")
	require.Len(t, e.inputs, 2)
}

// TestAgentRunAsksAndWaits: a step that asks the person a question holds the run in
// waiting_for_user with the question, unpins the box so it may sleep, and runs no step until the
// answer, which the next step carries after pinning the box again.
func TestAgentRunAsksAndWaits(t *testing.T) {
	e := newRunEnv(t)
	e.onStep(func(in activities.StepInput) (activities.StepResult, error) {
		if in.Step == 1 {
			return activities.StepResult{Question: "Blue or green?"}, nil
		}
		return activities.StepResult{Done: true, Text: "Painted it."}, nil
	})
	var during int
	var pinsDuring []string
	e.RegisterDelayedCallback(func() {
		e.mu.Lock()
		during, pinsDuring = len(e.inputs), slices.Clone(e.pins)
		e.mu.Unlock()
		e.SignalWorkflow(SignalRunMessage, RunMessageSignal{Text: "blue"})
	}, 3*time.Hour)
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.NoError(t, e.GetWorkflowError())
	require.Equal(t, 1, during, "no step ran while the question waited")
	require.Equal(t, []string{SignalPin, SignalUnpin}, pinsDuring, "the box is unpinned while the run waits")
	require.Len(t, e.inputs, 2)
	require.Equal(t, "blue", e.inputs[1].Message)
	require.Equal(t, []string{SignalPin, SignalUnpin, SignalPin, SignalUnpin}, e.pins)
	require.Equal(t, activities.RunStateInput{RunID: "run_1", State: cocoonbox.AgentRunWaitingForUser, Reason: "Blue or green?"}, e.states[0])
	require.Equal(t, cocoonbox.AgentRunRunning, e.states[1].State)
	require.Equal(t, cocoonbox.AgentRunSucceeded, e.states[2].State)
}

// TestAgentRunQuestionUnanswered: a question nobody answers within MaxAnswerWait fails the run,
// saying so; a cancel while it waits cancels it.
func TestAgentRunQuestionUnanswered(t *testing.T) {
	e := newRunEnv(t)
	e.onStep(func(activities.StepInput) (activities.StepResult, error) {
		return activities.StepResult{Question: "Which file?"}, nil
	})
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.ErrorContains(t, e.GetWorkflowError(), "nobody answered")
	last := e.states[len(e.states)-1]
	require.Equal(t, cocoonbox.AgentRunFailed, last.State)
	require.Contains(t, last.Reason, "nobody answered the agent's question within 168h0m0s: Which file?")

	e = newRunEnv(t)
	e.onStep(func(activities.StepInput) (activities.StepResult, error) {
		return activities.StepResult{Question: "Which file?"}, nil
	})
	e.RegisterDelayedCallback(func() { e.SignalWorkflow(SignalRunCancel, RunCancelSignal{By: "usr_a"}) }, time.Hour)
	e.ExecuteWorkflow(AgentRunWorkflow, testRun())
	require.NoError(t, e.GetWorkflowError())
	require.Equal(t, cocoonbox.AgentRunCancelled, e.states[len(e.states)-1].State)
	require.Len(t, e.inputs, 1)
}

// TestAgentRunRecords: a run asked to record starts recording before its first step and
// cancels the recorder once its last step is done.
func TestAgentRunRecords(t *testing.T) {
	e := newRunEnv(t)
	rec := &activities.Recorder{}
	e.RegisterActivity(rec)
	var order []string
	note := func(s string) {
		e.mu.Lock()
		defer e.mu.Unlock()
		order = append(order, s)
	}
	e.onStep(func(in activities.StepInput) (activities.StepResult, error) {
		note("step")
		return activities.StepResult{Done: in.Step == 2}, nil
	})
	cancelled := make(chan struct{})
	e.SetOnActivityCanceledListener(func(info *activity.Info) {
		if info.ActivityType.Name == "RecordDesktop" {
			note("cancel recording")
			close(cancelled)
		}
	})
	e.OnActivity(rec.RecordDesktop, mock.Anything, activities.RecordInput{RunID: "run_1", BoxID: testBox}).Return(
		func(context.Context, activities.RecordInput) error {
			note("record")
			<-cancelled // records until the run cancels it
			return nil
		})
	in := testRun()
	in.Record = true
	e.ExecuteWorkflow(AgentRunWorkflow, in)
	require.NoError(t, e.GetWorkflowError())
	require.Equal(t, cocoonbox.AgentRunSucceeded, e.finalState(t).State)
	e.mu.Lock()
	defer e.mu.Unlock()
	// The recorder and the steps run at once (the test environment runs each activity on a
	// goroutine of its own, and may cancel the recorder before its function was entered): what
	// the run promises is the recorder started and cancelled after its last step.
	require.Equal(t, []string{"step", "step", "cancel recording"}, slices.DeleteFunc(slices.Clone(order), func(s string) bool { return s == "record" }))
}
