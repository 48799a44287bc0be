package workflows

import (
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

// TestControlLeaseTellsRuns: taking over and handing back tell every agent run pinning the box,
// and only runs (other pins are not workflows).
func TestControlLeaseTellsRuns(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	var told []string
	for _, name := range []string{SignalRunTakeOver, SignalRunHandBack} {
		env.OnSignalExternalWorkflow(mock.Anything, AgentRunWorkflowID("run_7"), "", name, mock.Anything).Return(
			func(_, _, _, _ string, arg any) error {
				told = append(told, name+":"+arg.(RunLeaseSignal).Controller)
				return nil
			})
	}
	update(env, 0, UpdateCreate, CreateInput{})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalPin, PinSignal{Ref: "run_7"}) }, time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalPin, PinSignal{Ref: "mcp-session"}) }, time.Second)
	update(env, 2*time.Second, UpdateTakeOver, TakeOverInput{User: "ann"})
	update(env, 3*time.Second, UpdateHandBack, HandBackInput{User: "ann"})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, []string{SignalRunTakeOver + ":ann", SignalRunHandBack + ":"}, told)
}
