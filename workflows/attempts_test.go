package workflows

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

var (
	ag  = &activities.Agent{}
	att = &activities.Attempts{}
)

// attemptsEnv runs AttemptsWorkflow with its runs ending as runEnds says, the judge answering
// judge, and every state it records in states.
func attemptsEnv(t *testing.T, judge func() (activities.JudgeResult, error)) (*testsuite.TestWorkflowEnvironment, *[]string) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(testLogger(t))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(AttemptsWorkflow)
	env.RegisterWorkflow(AgentRunWorkflow)
	env.RegisterActivity(ag)
	env.RegisterActivity(att)
	env.OnWorkflow(AgentRunWorkflow, mock.Anything, mock.Anything).Return(
		func(_ any, in AgentRunInput) (AgentRunResult, error) {
			return AgentRunResult{State: cocoonbox.AgentRunSucceeded, Text: in.System}, nil
		})
	var states []string
	env.OnActivity(att.SetAttemptsState, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.AttemptsStateInput) error {
			states = append(states, in.State)
			return nil
		})
	env.OnActivity(ag.Judge, mock.Anything, activities.JudgeInput{ID: "att_1"}).Return(
		func(context.Context, activities.JudgeInput) (activities.JudgeResult, error) { return judge() })
	return env, &states
}

func attemptsInput() AttemptsInput {
	return AttemptsInput{ID: "att_1", BoxID: testBox, Owner: "u1", Task: "t", Model: "m",
		Forks: []cocoonbox.BoxID{"bx_00000000000000f1", "bx_00000000000000f2", "bx_00000000000000f3"}, Runs: []string{"run_1", "run_2", "run_3"}}
}

// TestAttemptsAcceptTheJudgesPick: the runs end, the judge picks, an accept of 0 adopts the
// pick, then the forks go; nothing is adopted before the accept.
func TestAttemptsAcceptTheJudgesPick(t *testing.T) {
	env, states := attemptsEnv(t, func() (activities.JudgeResult, error) { return activities.JudgeResult{Winner: 2, Reason: "r"}, nil })
	var adopted []int
	env.OnActivity(att.AdoptAttempt, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.AdoptAttemptInput) error {
			adopted = append(adopted, in.Choice)
			return nil
		}).Once()
	env.OnActivity(att.DropForks, mock.Anything, activities.DropForksInput{ID: "att_1"}).Return(nil).Once()
	var before AttemptsStatus
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryAttempts)
		require.NoError(t, err)
		require.NoError(t, v.Get(&before))
		env.UpdateWorkflow(UpdateAccept, "a1", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("accept rejected: %v", err) }, OnAccept: func() {}, OnComplete: func(any, error) {},
		}, AcceptInput{})
	}, time.Hour)
	env.ExecuteWorkflow(AttemptsWorkflow, attemptsInput())
	require.NoError(t, env.GetWorkflowError())
	var out AttemptsStatus
	require.NoError(t, env.GetWorkflowResult(&out))
	require.Equal(t, cocoonbox.AttemptsJudged, before.State)
	require.Equal(t, 2, before.Winner)
	require.Equal(t, []int{2}, adopted)
	require.Equal(t, AttemptsStatus{State: cocoonbox.AttemptsAccepted, Winner: 2, Reason: "r", Chosen: 2}, out)
	require.Equal(t, []string{cocoonbox.AttemptsJudging, cocoonbox.AttemptsAccepting, cocoonbox.AttemptsAccepted}, *states)
	env.AssertExpectations(t)
}

// TestAttemptsAcceptAgainAfterAFailedAdopt: an accept whose adopt fails answers why and leaves
// the run judged with every fork; another accept then adopts its choice and the forks go.
func TestAttemptsAcceptAgainAfterAFailedAdopt(t *testing.T) {
	env, states := attemptsEnv(t, func() (activities.JudgeResult, error) { return activities.JudgeResult{Winner: 2, Reason: "r"}, nil })
	var adopted []int
	env.OnActivity(att.AdoptAttempt, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.AdoptAttemptInput) error {
			adopted = append(adopted, in.Choice)
			if in.Try != len(adopted)-1 {
				t.Errorf("accept %d sent as try %d", len(adopted), in.Try)
			}
			if len(adopted) == 1 {
				return temporal.NewNonRetryableApplicationError("no sandbox free on the node", activities.ErrTypeNoCapacity, nil)
			}
			return nil
		}).Twice()
	env.OnActivity(att.DropForks, mock.Anything, activities.DropForksInput{ID: "att_1"}).Return(nil).Once()
	var first error
	var between AttemptsStatus
	accept := func(choice int, answer *error) {
		env.UpdateWorkflow(UpdateAccept, fmt.Sprintf("a%d", choice), &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("accept %d rejected: %v", choice, err) }, OnAccept: func() {},
			OnComplete: func(_ any, err error) {
				if answer != nil {
					*answer = err
				}
			},
		}, AcceptInput{Choice: choice})
	}
	env.RegisterDelayedCallback(func() { accept(0, &first) }, time.Hour)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryAttempts)
		require.NoError(t, err)
		require.NoError(t, v.Get(&between))
		accept(3, nil)
	}, 2*time.Hour)
	env.ExecuteWorkflow(AttemptsWorkflow, attemptsInput())
	require.NoError(t, env.GetWorkflowError())
	var out AttemptsStatus
	require.NoError(t, env.GetWorkflowResult(&out))
	require.ErrorContains(t, first, "no sandbox free on the node")
	require.Equal(t, cocoonbox.AttemptsJudged, between.State)
	require.Contains(t, between.Error, "no sandbox free on the node")
	require.Equal(t, []int{2, 3}, adopted)
	require.Equal(t, AttemptsStatus{State: cocoonbox.AttemptsAccepted, Winner: 2, Reason: "r", Chosen: 3}, out)
	require.Equal(t, []string{cocoonbox.AttemptsJudging, cocoonbox.AttemptsAccepting, cocoonbox.AttemptsJudged,
		cocoonbox.AttemptsAccepting, cocoonbox.AttemptsAccepted}, *states)
	env.AssertExpectations(t)
}

// TestAttemptsJudgeFails: with no verdict the forks go and the run fails, saying why; the box is
// never touched.
func TestAttemptsJudgeFails(t *testing.T) {
	env, states := attemptsEnv(t, func() (activities.JudgeResult, error) {
		return activities.JudgeResult{}, errors.New("judge: no attempt succeeded")
	})
	env.OnActivity(att.DropForks, mock.Anything, activities.DropForksInput{ID: "att_1"}).Return(nil).Once()
	env.ExecuteWorkflow(AttemptsWorkflow, attemptsInput())
	require.NoError(t, env.GetWorkflowError())
	var out AttemptsStatus
	require.NoError(t, env.GetWorkflowResult(&out))
	require.Equal(t, cocoonbox.AttemptsFailed, out.State)
	require.Contains(t, out.Error, "no attempt succeeded")
	require.Equal(t, cocoonbox.AttemptsFailed, (*states)[len(*states)-1])
	env.AssertActivityNumberOfCalls(t, "AdoptAttempt", 0)
}

// TestAttemptsUnansweredAreDiscarded: a pick nobody accepts within AttemptsWait is discarded.
func TestAttemptsUnansweredAreDiscarded(t *testing.T) {
	env, _ := attemptsEnv(t, func() (activities.JudgeResult, error) { return activities.JudgeResult{Winner: 1}, nil })
	env.OnActivity(att.DropForks, mock.Anything, mock.Anything).Return(nil).Once()
	env.ExecuteWorkflow(AttemptsWorkflow, attemptsInput())
	require.NoError(t, env.GetWorkflowError())
	var out AttemptsStatus
	require.NoError(t, env.GetWorkflowResult(&out))
	require.Equal(t, cocoonbox.AttemptsDiscarded, out.State)
	env.AssertActivityNumberOfCalls(t, "AdoptAttempt", 0)
}
