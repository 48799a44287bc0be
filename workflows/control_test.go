package workflows

import (
	"testing"
	"time"

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
