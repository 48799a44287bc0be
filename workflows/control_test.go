package workflows

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"github.com/loomhand/cocoonbox/activities"
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

// TestControlLeaseIdle: a lease whose holder has no control connection open is released after
// the policy's lease idle, counted from the take-over or from the last connection's close, and
// the runs waiting for the desktop are told; an open control connection keeps it however long,
// until its API process stops reporting it.
func TestControlLeaseIdle(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	var told []string
	env.OnSignalExternalWorkflow(mock.Anything, AgentRunWorkflowID("run_7"), "", SignalRunLease, mock.Anything).Return(
		func(_, _, _, _ string, arg any) error {
			told = append(told, arg.(RunLeaseSignal).Controller)
			return nil
		})
	holder := map[time.Duration]string{}
	at := func(d time.Duration) {
		env.RegisterDelayedCallback(func() { holder[d] = query(t, env).Controller }, d)
	}
	report := func(d time.Duration, open, control int) {
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(SignalViewers, ViewersSignal{Source: "api-1", Count: open, Control: control})
		}, d)
	}
	update(env, 0, UpdateCreate, CreateInput{})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalPin, PinSignal{Ref: "run_7", Run: true}) }, time.Second)

	// ann takes over and never connects: released lease idle after the take-over.
	update(env, 2*time.Second, UpdateTakeOver, TakeOverInput{User: "ann"})
	at(2*time.Second + DefaultLeaseIdle - time.Second)
	at(2*time.Second + DefaultLeaseIdle + time.Second)

	// bob connects in control mode: held past lease idle while connected, released lease idle
	// after he disconnects.
	update(env, 5*time.Minute, UpdateTakeOver, TakeOverInput{User: "bob"})
	report(5*time.Minute+10*time.Second, 2, 1)
	at(9 * time.Minute)
	report(9*time.Minute, 1, 0) // a viewer stays: only control connections count
	at(9*time.Minute + DefaultLeaseIdle - time.Second)
	at(9*time.Minute + DefaultLeaseIdle + time.Second)

	// carol's connection is on an API process that dies: her lease goes when its count expires.
	update(env, 12*time.Minute, UpdateTakeOver, TakeOverInput{User: "carol"})
	report(12*time.Minute+10*time.Second, 1, 1)
	at(12*time.Minute + 10*time.Second + ViewersReportTTL - time.Second)
	at(12*time.Minute + 10*time.Second + ViewersReportTTL + time.Second)
	deleteAt(env, 25*time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, map[time.Duration]string{
		2*time.Second + DefaultLeaseIdle - time.Second: "ann",
		2*time.Second + DefaultLeaseIdle + time.Second: "",
		9 * time.Minute: "bob",
		9*time.Minute + DefaultLeaseIdle - time.Second:                   "bob",
		9*time.Minute + DefaultLeaseIdle + time.Second:                   "",
		12*time.Minute + 10*time.Second + ViewersReportTTL - time.Second: "carol",
		12*time.Minute + 10*time.Second + ViewersReportTTL + time.Second: "",
	}, holder)
	require.Equal(t, []string{"ann", "", "bob", "", "carol", ""}, told, "the waiting run hears of every release")
	for _, who := range []string{"ann", "bob", "carol"} {
		env.AssertActivityCalled(t, "Event", mock.Anything, activities.EventInput{BoxID: testBox, Kind: "lease_released",
			Detail: "idle: " + who + " had no control connection for 2m0s"})
	}
}

// TestControlLeaseIdlePolicy: the policy's lease idle replaces the default, and taking the lease
// again restarts its clock.
func TestControlLeaseIdlePolicy(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	idle := 10 * time.Second
	holder := map[time.Duration]string{}
	at := func(d time.Duration) {
		env.RegisterDelayedCallback(func() { holder[d] = query(t, env).Controller }, d)
	}
	update(env, 0, UpdateCreate, CreateInput{})
	set := update(env, time.Second, UpdateSetPolicy, SetPolicyInput{LeaseIdle: &idle})
	update(env, 2*time.Second, UpdateTakeOver, TakeOverInput{User: "ann"})
	update(env, 8*time.Second, UpdateTakeOver, TakeOverInput{User: "ann"})
	at(17 * time.Second)
	at(19 * time.Second)
	bad := -time.Second
	neg := update(env, 20*time.Second, UpdateSetPolicy, SetPolicyInput{LeaseIdle: &bad})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, set.err)
	require.Equal(t, idle, set.status.Policy.LeaseIdle)
	require.Equal(t, map[time.Duration]string{17 * time.Second: "ann", 19 * time.Second: ""}, holder)
	require.ErrorContains(t, neg.rejected, "lease_idle: must not be negative")
}

// TestControlSlot: the desktop has one control connection, whichever API process serves it: a
// second is refused while the first is open, the same connection asking again is let through,
// the slot is free once the first closes, and a holder whose API process stops reporting (it
// died with its connections) lets go when its last report expires.
func TestControlSlot(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	update(env, 0, UpdateCreate, CreateInput{})
	claim := func(d time.Duration, conn, source string) *outcome {
		return update(env, d, UpdateControlConn, ControlConnInput{ID: conn, Source: source})
	}
	report := func(d time.Duration, source string, control int) {
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(SignalViewers, ViewersSignal{Source: source, Count: control, Control: control})
		}, d)
	}
	first := claim(time.Second, "c1", "api-a")
	second := claim(2*time.Second, "c2", "api-b")
	again := claim(3*time.Second, "c1", "api-a")
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalControlClosed, ControlClosedSignal{ID: "c1"}) }, 4*time.Second)
	afterClose := claim(5*time.Second, "c2", "api-b")
	// api-b reports its control connection as an API process does while it is open.
	last := 5 * time.Second
	for d := 6 * time.Second; d < 15*time.Minute; d += ViewersReportEvery {
		report(d, "api-b", 1)
		last = d
	}
	held := claim(5*time.Second+ViewersReportTTL+time.Minute, "c3", "api-a")
	stillHeld := claim(last+ViewersReportTTL-time.Second, "c3", "api-a")
	freed := claim(last+ViewersReportTTL+time.Second, "c4", "api-a")
	anon := claim(last+ViewersReportTTL+2*time.Second, "", "api-a")
	deleteAt(env, time.Hour)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, first.err)
	require.ErrorContains(t, second.err, "already has a controller connection", "a second control connection, from another API process")
	require.NoError(t, again.err, "the holder asking again (a retried request)")
	require.NoError(t, afterClose.err, "the slot is free once its connection closed")
	require.ErrorContains(t, held.err, "already has a controller connection", "held past a report's lifetime while reported")
	require.ErrorContains(t, stillHeld.err, "already has a controller connection")
	require.NoError(t, freed.err, "the holder's API process stopped reporting: the slot is free once its reports expire")
	require.ErrorContains(t, anon.rejected, "id and source are required")
}
