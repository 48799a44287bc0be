package workflows

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
)

func TestControlLease(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	update(env, 0, UpdateCreate, CreateInput{})
	ann := update(env, time.Second, UpdateTakeOver, TakeOverInput{User: "ann"})
	again := update(env, 2*time.Second, UpdateTakeOver, TakeOverInput{User: "ann"})
	bob := update(env, 3*time.Second, UpdateTakeOver, TakeOverInput{User: "bob"})
	bobBack := update(env, 4*time.Second, UpdateHandBack, HandBackInput{User: "bob"})
	owner := update(env, 5*time.Second, UpdateTakeOver, TakeOverInput{User: "owner", Force: true})
	back := update(env, 6*time.Second, UpdateHandBack, HandBackInput{User: "owner"})
	idle := update(env, 7*time.Second, UpdateHandBack, HandBackInput{User: "ann"})
	anon := update(env, 8*time.Second, UpdateTakeOver, TakeOverInput{})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, ann.err)
	require.Equal(t, "ann", ann.status.Controller)
	require.NoError(t, again.err, "taking over what one holds is a no-op")
	require.ErrorContains(t, bob.rejected, "controlled by ann", "a second person is refused while the lease is held")
	require.ErrorContains(t, bobBack.rejected, "not you")
	require.NoError(t, owner.err)
	require.Equal(t, "owner", owner.status.Controller, "the owner may take the lease by force")
	require.NoError(t, back.err)
	require.Empty(t, back.status.Controller)
	require.NoError(t, idle.err, "handing back a desktop nobody controls is a no-op")
	require.ErrorContains(t, anon.rejected, "user is required")
}

// TestControlLeaseTellsRuns: taking over and handing back tell every agent run pinning the box, in
// order on one channel, and only runs (other pins are not workflows); a run is the pin that says
// so, or, from before PinSignal.Run, one with a run ID.
func TestControlLeaseTellsRuns(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	told := map[string][]string{}
	for _, run := range []string{"run_7", "job-9"} {
		env.OnSignalExternalWorkflow(mock.Anything, AgentRunWorkflowID(run), "", SignalRunLease, mock.Anything).Return(
			func(_, _, _, _ string, arg any) error {
				l := arg.(RunLeaseSignal)
				told[run] = append(told[run], fmt.Sprintf("%s:%d", l.Controller, l.Seq))
				return nil
			})
	}
	update(env, 0, UpdateCreate, CreateInput{})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalPin, PinSignal{Ref: "run_7"}) }, time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalPin, PinSignal{Ref: "job-9", Run: true}) }, time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalPin, PinSignal{Ref: "mcp-session"}) }, time.Second)
	update(env, 2*time.Second, UpdateTakeOver, TakeOverInput{User: "ann"})
	update(env, 3*time.Second, UpdateHandBack, HandBackInput{User: "ann"})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalUnpin, PinSignal{Ref: "job-9"}) }, 4*time.Second)
	update(env, 5*time.Second, UpdateTakeOver, TakeOverInput{User: "bob"})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, map[string][]string{
		"run_7": {"ann:1", ":2", "bob:3"},
		"job-9": {"ann:1", ":2"}, // unpinned before bob's take-over
	}, told)
}
