package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

// TestQuickCalls: a create runs its claim (which writes the box row beside it) and its ready
// probe (which writes the running row after it) as local activities; a try that fails with an
// error worth retrying goes on as an activity (which the server retries and operators see), and
// one that cannot succeed on another try fails the create without one.
func TestQuickCalls(t *testing.T) {
	run := func(t *testing.T, firstErr error) (ran []string, create *outcome, records []*activities.RecordBoxInput) {
		env := newEnv(t)
		env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
			ran = append(ran, "local "+info.ActivityType.Name)
		})
		env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
			ran = append(ran, "activity "+info.ActivityType.Name)
		})
		tries := 0
		env.OnActivity(sb.Claim, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in activities.ClaimInput) (activities.ClaimResult, error) {
				records = append(records, in.Record)
				if tries++; tries == 1 {
					return activities.ClaimResult{}, firstErr
				}
				return activities.ClaimResult{SandboxID: "sb-1", Deadline: env.Now().Add(time.Hour)}, nil
			})
		create = update(env, 0, UpdateCreate, CreateInput{})
		deleteAt(env, time.Minute)
		env.ExecuteWorkflow(BoxWorkflow, input())
		require.True(t, env.IsWorkflowCompleted())
		return ran, create, records
	}
	row := &activities.RecordBoxInput{BoxID: testBox, Owner: "u1", Name: "dev", Size: cocoonbox.SizeSmall}
	t.Run("retryable", func(t *testing.T) {
		ran, create, records := run(t, temporal.NewApplicationError("the engine is busy", activities.ErrTypeUnavailable))
		require.NoError(t, create.err)
		require.Equal(t, cocoonbox.BoxStateRunning, create.status.State)
		require.Equal(t, []string{"local Claim", "activity Claim", "local ReadyRecorded"}, calls(ran))
		require.Equal(t, []*activities.RecordBoxInput{row, row}, records, "every try of the claim writes the box row")
	})
	t.Run("final", func(t *testing.T) {
		ran, create, _ := run(t, temporal.NewNonRetryableApplicationError("bad size", activities.ErrTypeInvalidArgument, nil))
		require.ErrorContains(t, create.err, "bad size")
		require.Equal(t, []string{"local Claim"}, calls(ran))
	})
}

// TestSlowClaimStaysLocal: a claim slower than the other calls' local try (a desktop's cold start
// on a busy node) finishes in its local try, where cutting it short would throw its start away and
// boot the box again in the activity after it.
func TestSlowClaimStaysLocal(t *testing.T) {
	env := newEnv(t)
	env.SetTestTimeout(time.Minute)
	var ran []string
	env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		ran = append(ran, "local "+info.ActivityType.Name)
	})
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		ran = append(ran, "activity "+info.ActivityType.Name)
	})
	env.OnActivity(sb.Claim, mock.Anything, mock.Anything).Return(
		func(context.Context, activities.ClaimInput) (activities.ClaimResult, error) {
			time.Sleep(quickTry + time.Second) // the try runs in real time
			return activities.ClaimResult{SandboxID: "sb-1", Deadline: env.Now().Add(time.Hour)}, nil
		})
	create := update(env, 0, UpdateCreate, CreateInput{})
	deleteAt(env, time.Minute)
	env.ExecuteWorkflow(BoxWorkflow, input())
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, create.err)
	require.Equal(t, []string{"local Claim", "local ReadyRecorded"}, calls(ran))
}

// calls is ran without the row writes (SetState, Event) and the delete's release.
func calls(ran []string) []string {
	var out []string
	for _, r := range ran {
		switch r {
		case "local SetState", "local Event", "local Release", "activity Release":
			continue
		}
		out = append(out, r)
	}
	return out
}

// TestCreateRecordsRunning: the running row goes with the create's ready probe, or, when that
// write fails, through the workflow's own write after it; the row says running once either way.
func TestCreateRecordsRunning(t *testing.T) {
	for name, probeWrites := range map[string]bool{"by the probe": true, "by the workflow": false} {
		t.Run(name, func(t *testing.T) {
			env, states := newEnvStates(t)
			if !probeWrites {
				readyRowFails(env)
			}
			claimOK(env, 1, "sb-1")
			create := update(env, 0, UpdateCreate, CreateInput{})
			deleteAt(env, time.Minute)
			env.ExecuteWorkflow(BoxWorkflow, input())
			require.NoError(t, env.GetWorkflowError())
			require.NoError(t, create.err)
			require.Equal(t, cocoonbox.BoxStateRunning, create.status.State)
			require.Equal(t, 1, count(*states, cocoonbox.BoxStateRunning), "states %v", *states)
			if probeWrites {
				env.AssertActivityNumberOfCalls(t, "SetState", 2) // deleting, deleted
			} else {
				env.AssertActivityNumberOfCalls(t, "SetState", 3) // running too
			}
		})
	}
}
