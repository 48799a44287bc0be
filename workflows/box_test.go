package workflows

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

const testBox = cocoonbox.BoxID("bx_0123456789abcdef")

var (
	sb   = &activities.Sandbox{}
	st   = &activities.Store{}
	snap = &activities.Snapshots{}
)

// newEnv returns a test environment with the store mocked to succeed and a claim that answers a
// one-hour lease; tests add the sandbox mocks they care about.
func newEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	env, _ := newEnvStates(t)
	return env
}

// newEnvStates is newEnv that also records every state the workflow writes to the box row, in
// order.
func newEnvStates(t *testing.T) (*testsuite.TestWorkflowEnvironment, *[]cocoonbox.BoxState) {
	t.Helper()
	env, states, _ := newEnvRecorded(t)
	return env, states
}

// newEnvRecorded is newEnvStates that also records the box's events, as "kind: detail".
func newEnvRecorded(t *testing.T) (*testsuite.TestWorkflowEnvironment, *[]cocoonbox.BoxState, *[]string) {
	t.Helper()
	return newEnvRowFails(t, "")
}

// newEnvRowFails is newEnvRecorded whose every write of the box row in state fails, as when
// PostgreSQL is not answering; the failed writes are not recorded.
func newEnvRowFails(t *testing.T, state cocoonbox.BoxState) (*testsuite.TestWorkflowEnvironment, *[]cocoonbox.BoxState, *[]string) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(testLogger(t))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(BoxWorkflow)
	env.RegisterWorkflow(SnapshotWorkflow)
	env.RegisterActivity(sb)
	env.RegisterActivity(st)
	env.RegisterActivity(snap)
	var states []cocoonbox.BoxState
	var events []string
	env.OnActivity(st.RecordBox, mock.Anything, mock.Anything).Return(nil).Maybe()
	// No engine node is chosen (placedOn sets one): a restore runs on the shared queue.
	env.OnActivity(snap.PlaceRestore, mock.Anything, mock.Anything).Return(func(context.Context, activities.PlaceRestoreInput) (activities.PlaceRestoreResult, error) {
		node, _ := envPlaced.Load(env)
		s, _ := node.(string)
		return activities.PlaceRestoreResult{Node: s}, nil
	}).Maybe()
	t.Cleanup(func() { envPlaced.Delete(env) })
	rows := func(_ context.Context, in activities.SetStateInput) error {
		if in.State == state {
			return errors.New("write box row: the database is not answering")
		}
		states = append(states, in.State)
		if in.Event != nil { // written with the row, in its transaction
			events = append(events, in.Event.Kind+": "+in.Event.Detail)
		}
		return nil
	}
	envRows.Store(env, rows)
	t.Cleanup(func() { envRows.Delete(env) })
	env.OnActivity(st.SetState, mock.Anything, mock.Anything).Return(rows).Maybe()
	env.OnActivity(st.Event, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.EventInput) error {
			events = append(events, in.Kind+": "+in.Detail)
			return nil
		}).Maybe()
	env.OnActivity(sb.WaitReady, mock.Anything, mock.Anything).Return(nil).Maybe()
	// A create's ready probe writes the running row itself, through the same rows, unless the
	// test has that write fail (readyRowFails).
	env.OnActivity(sb.ReadyRecorded, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.ReadyRecordedInput) (activities.ReadyRecordedResult, error) {
			if _, fails := envReadyRowFails.Load(env); fails {
				return activities.ReadyRecordedResult{}, nil
			}
			return activities.ReadyRecordedResult{Settled: rows(ctx, in.Then) == nil}, nil
		}).Maybe()
	t.Cleanup(func() { envReadyRowFails.Delete(env) })
	return env, &states, &events
}

// envReadyRowFails holds the test environments whose ready probes cannot write the box row.
var envReadyRowFails sync.Map // *testsuite.TestWorkflowEnvironment -> struct{}

// readyRowFails has env's ready probes answer without writing the running row.
func readyRowFails(env *testsuite.TestWorkflowEnvironment) { envReadyRowFails.Store(env, struct{}{}) }

// envPlaced holds the node each test environment's restores are placed on (placedOn).
var envPlaced sync.Map // *testsuite.TestWorkflowEnvironment -> string

// placedOn has env's restores placed on node.
func placedOn(env *testsuite.TestWorkflowEnvironment, node string) { envPlaced.Store(env, node) }

// envRows holds each test environment's SetState mock (newEnvRowFails), for hibernates.
var envRows sync.Map // *testsuite.TestWorkflowEnvironment -> func(context.Context, activities.SetStateInput) error

// hibernates mocks a hibernate of the box's sandbox as the workflow makes it: HibernateRecorded,
// whose row goes through the environment's SetState mock first (the activity writes it before
// the engine call, and makes no engine call when it fails), then hibernate (nil: success), then
// the hibernated row when the workflow hands it over. want is the sandbox the call must name
// (nil: any).
func hibernates(env *testsuite.TestWorkflowEnvironment, want *activities.SandboxInput, hibernate func(activities.SandboxInput) error) *testsuite.MockCallWrapper {
	v, _ := envRows.Load(env)
	rows := v.(func(context.Context, activities.SetStateInput) error)
	match := mock.MatchedBy(func(in activities.HibernateRecordedInput) bool { return want == nil || in.SandboxInput == *want })
	return env.OnActivity(sb.HibernateRecorded, mock.Anything, match).Return(
		func(ctx context.Context, in activities.HibernateRecordedInput) (activities.HibernateRecordedResult, error) {
			if err := rows(ctx, in.Record); err != nil {
				return activities.HibernateRecordedResult{}, fmt.Errorf("hibernate: record the box's state: %w", err)
			}
			if hibernate != nil {
				if err := hibernate(in.SandboxInput); err != nil {
					return activities.HibernateRecordedResult{}, err
				}
			}
			if in.Then == nil || rows(ctx, *in.Then) != nil {
				return activities.HibernateRecordedResult{}, nil
			}
			return activities.HibernateRecordedResult{Settled: true}, nil
		})
}

// testLogger keeps the SDK's DEBUG and INFO chatter out of test output: warnings and errors only,
// written through t so they show with the failing test.
func testLogger(t *testing.T) log.Logger {
	h := slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})
	return log.NewStructuredLogger(slog.New(h))
}

func claimOK(env *testsuite.TestWorkflowEnvironment, attempt int, id string) {
	env.OnActivity(sb.Claim, mock.Anything, mock.MatchedBy(func(in activities.ClaimInput) bool {
		return in.Attempt == attempt
	})).Return(func(_ context.Context, _ activities.ClaimInput) (activities.ClaimResult, error) {
		return activities.ClaimResult{SandboxID: id, Deadline: env.Now().Add(time.Hour)}, nil
	}).Once()
}

// update sends an update at delay and records its outcome.
type outcome struct {
	status   Status
	err      error
	rejected error
	done     bool
	at       time.Time      // the workflow's clock when the update answered
	snapshot SnapshotResult // the snapshot update's answer
	move     MoveResult     // the move update's answer
}

func update(env *testsuite.TestWorkflowEnvironment, delay time.Duration, name string, arg any) *outcome {
	o := &outcome{}
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(name, name+delay.String(), &testsuite.TestUpdateCallback{
			OnReject: func(err error) { o.rejected, o.done = err, true },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				o.err, o.done, o.at = err, true, env.Now()
				switch r := v.(type) {
				case Status:
					o.status = r
				case SnapshotResult:
					o.status, o.snapshot = r.Status, r
				case MoveResult:
					o.status, o.move = r.Status, r
				}
			},
		}, arg)
	}, delay)
	return o
}

func query(t *testing.T, env *testsuite.TestWorkflowEnvironment) Status {
	t.Helper()
	v, err := env.QueryWorkflow(QueryStatus)
	require.NoError(t, err)
	var s Status
	require.NoError(t, v.Get(&s))
	return s
}

func input() BoxWorkflowInput {
	return BoxWorkflowInput{BoxID: testBox, Owner: "u1", Name: "dev", Size: cocoonbox.SizeSmall}
}

// deleteAt ends the workflow so tests that do not test delete still finish.
func deleteAt(env *testsuite.TestWorkflowEnvironment, d time.Duration) *outcome {
	env.OnActivity(sb.Release, mock.Anything, mock.Anything).Return(nil).Maybe()
	return update(env, d, UpdateDelete, DeleteInput{})
}

func TestLifecycle(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	hibernates(env, &activities.SandboxInput{BoxID: testBox, SandboxID: "sb-1"}, nil).Once()
	env.OnActivity(sb.Wake, mock.Anything, activities.SandboxInput{BoxID: testBox, SandboxID: "sb-1"}).Return(nil).Once()
	env.OnActivity(sb.Release, mock.Anything, activities.SandboxInput{BoxID: testBox, SandboxID: "sb-1"}).Return(nil).Once()

	var states []cocoonbox.BoxState
	create := update(env, 0, UpdateCreate, CreateInput{})
	env.RegisterDelayedCallback(func() { states = append(states, query(t, env).State) }, time.Second)
	again := update(env, 2*time.Second, UpdateCreate, CreateInput{})
	hib := update(env, 3*time.Second, UpdateHibernate, HibernateInput{})
	env.RegisterDelayedCallback(func() { states = append(states, query(t, env).State) }, 4*time.Second)
	wake := update(env, 5*time.Second, UpdateWake, WakeInput{})
	env.RegisterDelayedCallback(func() { states = append(states, query(t, env).State) }, 6*time.Second)
	del := update(env, 7*time.Second, UpdateDelete, DeleteInput{})

	env.ExecuteWorkflow(BoxWorkflow, input())

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, create.err)
	require.Equal(t, cocoonbox.BoxStateRunning, create.status.State)
	require.Equal(t, "sb-1", create.status.SandboxID)
	require.NoError(t, again.err)
	require.Equal(t, cocoonbox.BoxStateRunning, again.status.State, "a second create answers the status")
	require.NoError(t, hib.err)
	require.NoError(t, wake.err)
	require.NoError(t, del.err)
	require.Equal(t, cocoonbox.BoxStateDeleted, del.status.State)
	require.Equal(t, []cocoonbox.BoxState{cocoonbox.BoxStateRunning, cocoonbox.BoxStateHibernated, cocoonbox.BoxStateRunning}, states)
	env.AssertExpectations(t)
	env.AssertActivityNumberOfCalls(t, "Claim", 1)
}

// TestHibernateNeedsItsRow: the API reaches the sandbox of a box whose row says it runs without
// asking the workflow, and an engine call wakes a sleeping sandbox; so a box whose row cannot be
// moved to hibernating stays running, its sandbox untouched, and the hibernate fails saying why.
func TestHibernateNeedsItsRow(t *testing.T) {
	env, states, _ := newEnvRowFails(t, cocoonbox.BoxStateHibernating)
	claimOK(env, 1, "sb-1")
	slept := 0
	hibernates(env, nil, func(activities.SandboxInput) error { slept++; return nil }).Maybe()
	update(env, 0, UpdateCreate, CreateInput{})
	hib := update(env, time.Second, UpdateHibernate, HibernateInput{})
	var after Status
	env.RegisterDelayedCallback(func() { after = query(t, env) }, 5*time.Minute)
	deleteAt(env, 6*time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.True(t, hib.done)
	require.ErrorContains(t, hib.err, "database is not answering")
	require.Equal(t, 0, slept, "the sandbox was put to sleep while its row said running")
	require.Equal(t, cocoonbox.BoxStateRunning, after.State)
	require.Contains(t, after.LastError, "hibernate: record the box's state")
	require.NotContains(t, *states, cocoonbox.BoxStateHibernated)
}

// TestHibernateSettlesInOneCall: the local activity that hibernates the sandbox writes the
// hibernated row and its event too, so the workflow writes neither again; when that last write
// fails (the sandbox sleeps), the workflow writes the row itself.
func TestHibernateSettlesInOneCall(t *testing.T) {
	t.Run("settled by the activity", func(t *testing.T) {
		env, states, events := newEnvRecorded(t)
		claimOK(env, 1, "sb-1")
		hibernates(env, nil, nil).Once()
		update(env, 0, UpdateCreate, CreateInput{})
		hib := update(env, time.Second, UpdateHibernate, HibernateInput{})
		deleteAt(env, 5*time.Minute)

		env.ExecuteWorkflow(BoxWorkflow, input())
		require.NoError(t, env.GetWorkflowError())
		require.NoError(t, hib.err)
		require.Equal(t, cocoonbox.BoxStateHibernated, hib.status.State)
		require.Equal(t, 1, count(*states, cocoonbox.BoxStateHibernated), "states: %v", *states)
		require.Equal(t, 1, count(*events, "hibernated: requested"), "events: %v", *events)
		// Deleting and deleted: the running row went with the create's ready probe.
		env.AssertActivityNumberOfCalls(t, "SetState", 2)
	})
	t.Run("the last row failed", func(t *testing.T) {
		env, states, events := newEnvRecorded(t)
		claimOK(env, 1, "sb-1")
		env.OnActivity(sb.HibernateRecorded, mock.Anything, mock.Anything).Return(activities.HibernateRecordedResult{}, nil).Once()
		update(env, 0, UpdateCreate, CreateInput{})
		hib := update(env, time.Second, UpdateHibernate, HibernateInput{})
		deleteAt(env, 5*time.Minute)

		env.ExecuteWorkflow(BoxWorkflow, input())
		require.NoError(t, env.GetWorkflowError())
		require.NoError(t, hib.err)
		require.Equal(t, cocoonbox.BoxStateHibernated, hib.status.State)
		require.Equal(t, 1, count(*states, cocoonbox.BoxStateHibernated), "the workflow wrote the row: %v", *states)
		require.Equal(t, 1, count(*events, "hibernated: requested"), "events: %v", *events)
	})
}

// count is how many of xs equal x.
func count[T comparable](xs []T, x T) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

func TestInvalidTransitionsRejected(t *testing.T) {
	env := newEnv(t)
	// Claim is slow, so the wake arrives while the box is still creating.
	env.OnActivity(sb.Claim, mock.Anything, mock.Anything).After(time.Minute).
		Return(activities.ClaimResult{SandboxID: "sb-1"}, nil).Once()
	update(env, 0, UpdateCreate, CreateInput{})
	wake := update(env, time.Second, UpdateWake, WakeInput{})
	var during Status
	env.RegisterDelayedCallback(func() { during = query(t, env) }, 2*time.Second)
	deleteAt(env, 2*time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	requireTransitionError(t, wake.rejected)
	require.Equal(t, cocoonbox.BoxStateCreating, during.State, "the rejected wake changed nothing")
	env.AssertActivityNumberOfCalls(t, "Wake", 0)
}

func TestHibernateDeletedBoxRejected(t *testing.T) {
	t.Run("deleting: the validator rejects it", func(t *testing.T) {
		env, states := newEnvStates(t)
		claimOK(env, 1, "sb-1")
		// Release is slow, so the box is still deleting when the hibernate arrives.
		env.OnActivity(sb.Release, mock.Anything, mock.Anything).After(time.Minute).Return(nil).Once()
		update(env, 0, UpdateCreate, CreateInput{})
		del := update(env, time.Second, UpdateDelete, DeleteInput{})
		var before, after Status
		env.RegisterDelayedCallback(func() { before = query(t, env) }, 2*time.Second)
		hib := update(env, 3*time.Second, UpdateHibernate, HibernateInput{})
		env.RegisterDelayedCallback(func() { after = query(t, env) }, 4*time.Second)

		env.ExecuteWorkflow(BoxWorkflow, input())
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, env.GetWorkflowError())
		require.True(t, hib.done, "the hibernate got an answer")
		requireTransitionError(t, hib.rejected)
		require.NoError(t, hib.err)
		require.Equal(t, cocoonbox.BoxStateDeleting, before.State)
		require.Equal(t, before, after, "the rejected hibernate changed nothing")
		require.NoError(t, del.err)
		require.Equal(t, cocoonbox.BoxStateDeleted, del.status.State)
		require.Equal(t, []cocoonbox.BoxState{
			cocoonbox.BoxStateRunning, cocoonbox.BoxStateDeleting, cocoonbox.BoxStateDeleted,
		}, *states)
		env.AssertActivityNumberOfCalls(t, "HibernateRecorded", 0)
	})
	t.Run("deleted while it waited: the handler rejects it", func(t *testing.T) {
		// A hibernate accepted while the box was waking waits on the mutex with a delete; when
		// its turn comes the box is deleted, and it must answer InvalidTransition without touching
		// the released sandbox. The SDK's mutex wakes waiting updates newest first, so the delete
		// is sent after the hibernate to be served before it.
		env, states := newEnvStates(t)
		claimOK(env, 1, "sb-1")
		hibernates(env, nil, nil).Once()
		env.OnActivity(sb.Wake, mock.Anything, mock.Anything).After(time.Minute).Return(nil).Once()
		env.OnActivity(sb.Release, mock.Anything, mock.Anything).Return(nil).Once()
		update(env, 0, UpdateCreate, CreateInput{})
		update(env, time.Second, UpdateHibernate, HibernateInput{})
		wake := update(env, 2*time.Second, UpdateWake, WakeInput{})
		hib := update(env, 3*time.Second, UpdateHibernate, HibernateInput{})
		del := update(env, 4*time.Second, UpdateDelete, DeleteInput{})

		env.ExecuteWorkflow(BoxWorkflow, input())
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, env.GetWorkflowError())
		require.NoError(t, wake.err)
		require.NoError(t, del.err)
		require.True(t, hib.done, "the hibernate got an answer")
		require.NoError(t, hib.rejected, "accepted: the box was waking")
		requireTransitionError(t, hib.err)
		require.Equal(t, cocoonbox.BoxStateDeleted, hib.status.State)
		require.Empty(t, hib.status.SandboxID)
		require.Equal(t, []cocoonbox.BoxState{
			cocoonbox.BoxStateRunning, cocoonbox.BoxStateHibernating, cocoonbox.BoxStateHibernated,
			cocoonbox.BoxStateWaking, cocoonbox.BoxStateRunning,
			cocoonbox.BoxStateDeleting, cocoonbox.BoxStateDeleted,
		}, *states)
		env.AssertActivityNumberOfCalls(t, "HibernateRecorded", 1) // the first one only
	})
}

func TestWakeCreatingBoxTwiceRejected(t *testing.T) {
	env, states := newEnvStates(t)
	// Claim is slow, so both wakes arrive while the box is still creating.
	env.OnActivity(sb.Claim, mock.Anything, mock.Anything).After(time.Minute).
		Return(activities.ClaimResult{SandboxID: "sb-1"}, nil).Once()
	create := update(env, 0, UpdateCreate, CreateInput{})
	var before, after Status
	env.RegisterDelayedCallback(func() { before = query(t, env) }, time.Second)
	w1 := update(env, 2*time.Second, UpdateWake, WakeInput{})
	w2 := update(env, 3*time.Second, UpdateWake, WakeInput{})
	env.RegisterDelayedCallback(func() { after = query(t, env) }, 4*time.Second)
	deleteAt(env, 2*time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	for _, w := range []*outcome{w1, w2} {
		require.True(t, w.done, "the wake got an answer")
		requireTransitionError(t, w.rejected)
	}
	require.Equal(t, cocoonbox.BoxStateCreating, before.State)
	require.Empty(t, before.SandboxID)
	require.Equal(t, before, after, "the rejected wakes changed nothing")
	require.NoError(t, create.err, "the create the wakes raced finished undisturbed")
	require.Equal(t, cocoonbox.BoxStateRunning, create.status.State)
	require.NotContains(t, *states, cocoonbox.BoxStateWaking)
	env.AssertActivityNumberOfCalls(t, "Wake", 0)
	env.AssertActivityNumberOfCalls(t, "Claim", 1)
}

func requireTransitionError(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, ErrTypeInvalidTransition, errorType(err), "%v", err)
}

func TestConcurrentWakesOneEngineWake(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	hibernates(env, nil, nil)
	env.OnActivity(sb.Wake, mock.Anything, mock.Anything).After(10 * time.Second).Return(nil).Once()
	update(env, 0, UpdateCreate, CreateInput{})
	update(env, time.Second, UpdateHibernate, HibernateInput{})
	w1 := update(env, 2*time.Second, UpdateWake, WakeInput{})
	w2 := update(env, 2*time.Second+time.Millisecond, UpdateWake, WakeInput{})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, w1.err)
	require.NoError(t, w2.err)
	require.Equal(t, cocoonbox.BoxStateRunning, w1.status.State)
	require.Equal(t, cocoonbox.BoxStateRunning, w2.status.State)
	env.AssertActivityNumberOfCalls(t, "Wake", 1)
}

func idleInput() BoxWorkflowInput {
	in := input()
	in.Policy.IdleAfter = 10 * time.Minute
	return in
}

func TestIdleHibernates(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	hibernates(env, nil, nil).Once()
	update(env, 0, UpdateCreate, CreateInput{})
	var at9, at11 Status
	env.RegisterDelayedCallback(func() { at9 = query(t, env) }, 9*time.Minute)
	env.RegisterDelayedCallback(func() { at11 = query(t, env) }, 11*time.Minute)
	deleteAt(env, 20*time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, idleInput())
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, cocoonbox.BoxStateRunning, at9.State)
	require.Equal(t, cocoonbox.BoxStateHibernated, at11.State)
	env.AssertActivityNumberOfCalls(t, "HibernateRecorded", 1)
}

// TestIdleExplainsItself: an idle box warns before it hibernates, once per deadline, and its
// events say why it slept and who woke it.
func TestIdleExplainsItself(t *testing.T) {
	env, _, events := newEnvRecorded(t)
	claimOK(env, 1, "sb-1")
	hibernates(env, nil, nil)
	env.OnActivity(sb.Wake, mock.Anything, mock.Anything).Return(nil)
	update(env, 0, UpdateCreate, CreateInput{})
	// A touch at 5m moves the deadline to 15m: the warning comes at 12m30s, not at 7m30s.
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalTouch, struct{}{}) }, 5*time.Minute)
	var at8 Status
	env.RegisterDelayedCallback(func() { at8 = query(t, env) }, 8*time.Minute)
	update(env, 20*time.Minute, UpdateWake, WakeInput{Reason: "requested by alice"})
	update(env, 21*time.Minute, UpdateHibernate, HibernateInput{By: "bob"})
	deleteAt(env, 22*time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, idleInput())
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, cocoonbox.BoxStateRunning, at8.State)
	var kinds []string
	for _, e := range *events {
		kinds = append(kinds, strings.SplitN(e, ":", 2)[0])
	}
	require.Equal(t, []string{"idle_warning", "hibernated", "woke", "hibernated"}, kinds, "events: %q", *events)
	require.Contains(t, (*events)[0], "after 10m0s with nothing happening")
	require.Equal(t, "hibernated: idle", (*events)[1])
	require.Equal(t, "woke: requested by alice", (*events)[2])
	require.Equal(t, "hibernated: requested by bob", (*events)[3])
}

func TestIdleBlockedByViewerPinAndTouch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		signal string
		arg    any
	}{
		{"viewer", SignalViewers, ViewersSignal{Count: 1}},
		{"pin", SignalPin, PinSignal{Ref: "run-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			claimOK(env, 1, "sb-1")
			update(env, 0, UpdateCreate, CreateInput{})
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(tc.signal, tc.arg) }, time.Minute)
			var later Status
			env.RegisterDelayedCallback(func() { later = query(t, env) }, time.Hour)
			deleteAt(env, time.Hour+time.Minute)

			env.ExecuteWorkflow(BoxWorkflow, idleInput())
			require.NoError(t, env.GetWorkflowError())
			require.Equal(t, cocoonbox.BoxStateRunning, later.State)
			require.True(t, later.IdleDeadline.IsZero())
			env.AssertActivityNumberOfCalls(t, "HibernateRecorded", 0)
		})
	}
	t.Run("touch", func(t *testing.T) {
		env := newEnv(t)
		claimOK(env, 1, "sb-1")
		hibernates(env, nil, nil).Once()
		update(env, 0, UpdateCreate, CreateInput{})
		// A touch at 8m restarts the 10m clock: running at 15m, hibernated by 19m.
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalTouch, struct{}{}) }, 8*time.Minute)
		var at15, at19 Status
		env.RegisterDelayedCallback(func() { at15 = query(t, env) }, 15*time.Minute)
		env.RegisterDelayedCallback(func() { at19 = query(t, env) }, 19*time.Minute)
		deleteAt(env, 30*time.Minute)
		env.ExecuteWorkflow(BoxWorkflow, idleInput())
		require.NoError(t, env.GetWorkflowError())
		require.Equal(t, cocoonbox.BoxStateRunning, at15.State)
		require.Equal(t, cocoonbox.BoxStateHibernated, at19.State)
	})
}

// TestViewersAddUpBySource: each API process reports its own viewer count; the box's viewers
// are their sum, so one process's 0 does not cancel another's viewer. A process that stops
// reporting (it died, and its connections with it) no longer counts after ViewersReportTTL, and
// the box idles from then; one that repeats its count keeps the box awake.
func TestViewersAddUpBySource(t *testing.T) {
	t.Run("a silent source expires", func(t *testing.T) {
		env := newEnv(t)
		claimOK(env, 1, "sb-1")
		hibernates(env, nil, nil).Once()
		update(env, 0, UpdateCreate, CreateInput{})
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalViewers, ViewersSignal{Source: "api-a", Count: 1}) }, time.Minute)
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalViewers, ViewersSignal{Source: "api-b", Count: 2}) }, 2*time.Minute)
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalViewers, ViewersSignal{Source: "api-b", Count: 0}) }, 3*time.Minute)
		var at3, at10, at13 Status
		env.RegisterDelayedCallback(func() { at3 = query(t, env) }, 3*time.Minute+time.Second)
		env.RegisterDelayedCallback(func() { at10 = query(t, env) }, 10*time.Minute)
		env.RegisterDelayedCallback(func() { at13 = query(t, env) }, 13*time.Minute+time.Second)
		deleteAt(env, time.Hour)

		env.ExecuteWorkflow(BoxWorkflow, idleInput())
		require.NoError(t, env.GetWorkflowError())
		require.Equal(t, 1, at3.Viewers, "api-b's 0 leaves api-a's viewer")
		require.Equal(t, cocoonbox.BoxStateRunning, at10.State)
		require.True(t, at10.IdleDeadline.IsZero(), "idle does not count while api-a's viewer is")
		// api-a last reported at 1m: its count is gone at 11m, and the box idled 10m after the
		// last report (api-b's, at 3m).
		require.Equal(t, 0, at13.Viewers)
		require.Equal(t, cocoonbox.BoxStateHibernated, at13.State)
		env.AssertActivityNumberOfCalls(t, "HibernateRecorded", 1)
	})
	t.Run("a source ends the count of an older API", func(t *testing.T) {
		env := newEnv(t)
		claimOK(env, 1, "sb-1")
		update(env, 0, UpdateCreate, CreateInput{})
		// An older API counted a viewer and went away before reporting 0.
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalViewers, ViewersSignal{Count: 1}) }, time.Minute)
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalViewers, ViewersSignal{Source: "api-a", Count: 2}) }, 2*time.Minute)
		var at3 Status
		env.RegisterDelayedCallback(func() { at3 = query(t, env) }, 3*time.Minute)
		deleteAt(env, 4*time.Minute)

		env.ExecuteWorkflow(BoxWorkflow, idleInput())
		require.NoError(t, env.GetWorkflowError())
		require.Equal(t, 2, at3.Viewers, "the count without a source no longer adds")
	})
	t.Run("a reporting source keeps the box awake", func(t *testing.T) {
		env := newEnv(t)
		claimOK(env, 1, "sb-1")
		update(env, 0, UpdateCreate, CreateInput{})
		for at := time.Minute; at < time.Hour; at += ViewersReportEvery {
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalViewers, ViewersSignal{Source: "api-a", Count: 1}) }, at)
		}
		var later Status
		env.RegisterDelayedCallback(func() { later = query(t, env) }, time.Hour)
		deleteAt(env, time.Hour+time.Minute)

		env.ExecuteWorkflow(BoxWorkflow, idleInput())
		require.NoError(t, env.GetWorkflowError())
		require.Equal(t, cocoonbox.BoxStateRunning, later.State)
		require.Equal(t, 1, later.Viewers)
		env.AssertActivityNumberOfCalls(t, "HibernateRecorded", 0)
	})
}

func TestLeaseRenewedBeforeDeadline(t *testing.T) {
	env := newEnv(t)
	start := env.Now()
	claimOK(env, 1, "sb-1") // one-hour lease
	var renewedAt []time.Duration
	env.OnActivity(sb.Renew, mock.Anything, mock.Anything).Return(
		func(_ context.Context, _ activities.RenewInput) (activities.RenewResult, error) {
			renewedAt = append(renewedAt, env.Now().Sub(start))
			return activities.RenewResult{Deadline: env.Now().Add(time.Hour)}, nil
		})
	update(env, 0, UpdateCreate, CreateInput{})
	deleteAt(env, 3*time.Hour)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NotEmpty(t, renewedAt)
	require.Less(t, renewedAt[0], time.Hour, "renewed before the first deadline")
	require.InDelta(t, (40 * time.Minute).Seconds(), renewedAt[0].Seconds(), 60, "at two thirds of the lease")
	require.GreaterOrEqual(t, len(renewedAt), 4)
}

func TestActivityRetries(t *testing.T) {
	t.Run("unavailable is retried", func(t *testing.T) {
		env := newEnv(t)
		env.OnActivity(sb.Claim, mock.Anything, mock.Anything).
			Return(activities.ClaimResult{}, temporal.NewApplicationError("engine down", activities.ErrTypeUnavailable)).Once()
		claimOK(env, 1, "sb-1")
		create := update(env, 0, UpdateCreate, CreateInput{})
		deleteAt(env, time.Hour)
		env.ExecuteWorkflow(BoxWorkflow, input())
		require.NoError(t, env.GetWorkflowError())
		require.NoError(t, create.err)
		require.Equal(t, cocoonbox.BoxStateRunning, create.status.State)
		env.AssertActivityNumberOfCalls(t, "Claim", 2)
	})
	t.Run("invalid argument is not", func(t *testing.T) {
		env := newEnv(t)
		env.OnActivity(sb.Claim, mock.Anything, mock.Anything).
			Return(activities.ClaimResult{}, temporal.NewNonRetryableApplicationError("bad size", activities.ErrTypeInvalidArgument, nil))
		create := update(env, 0, UpdateCreate, CreateInput{})
		deleteAt(env, time.Hour)
		env.ExecuteWorkflow(BoxWorkflow, input())
		require.NoError(t, env.GetWorkflowError())
		require.Error(t, create.err)
		require.Equal(t, activities.ErrTypeInvalidArgument, errorType(create.err))
		require.Equal(t, cocoonbox.BoxStateFailed, create.status.State)
		env.AssertActivityNumberOfCalls(t, "Claim", 1)
	})
}

func TestContinueAsNewCarriesState(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	hibernates(env, nil, nil)
	in := input()
	in.OpsBeforeContinue = 2
	update(env, 0, UpdateCreate, CreateInput{})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalPin, PinSignal{Ref: "run-1"}) }, time.Second)
	update(env, 2*time.Second, UpdateHibernate, HibernateInput{})

	env.ExecuteWorkflow(BoxWorkflow, in)
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, err, &can)
	var next BoxWorkflowInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.NotNil(t, next.State)
	require.Equal(t, cocoonbox.BoxStateHibernated, next.State.State)
	require.Equal(t, "sb-1", next.State.SandboxID)
	require.Equal(t, 1, next.State.Attempt)
	require.Equal(t, []string{"run-1"}, next.State.Pins)
	require.Equal(t, testBox, next.BoxID)
}

// TestRefusedTransitions writes out which lifecycle updates each state refuses, so a change to the
// refusals table is a change to this matrix too. "." is allowed, "x" refused.
func TestRefusedTransitions(t *testing.T) {
	updates := []string{UpdateCreate, UpdateWake, UpdateHibernate, UpdateDelete, UpdateSnapshot, UpdateRestore, UpdateTakeOver, UpdateSetNetwork}
	want := map[cocoonbox.BoxState]string{
		//                            create wake hibernate delete snapshot restore takeover setnetwork
		cocoonbox.BoxStateCreating:     ". x x . x x x x",
		cocoonbox.BoxStateRunning:      ". . . . . . . .",
		cocoonbox.BoxStateHibernating:  ". . . . . . . .",
		cocoonbox.BoxStateHibernated:   ". . . . . . . .",
		cocoonbox.BoxStateWaking:       ". . . . . . . .",
		cocoonbox.BoxStateSnapshotting: ". . . . . . . .",
		cocoonbox.BoxStateRestoring:    ". . . . . . . .",
		cocoonbox.BoxStateDeleting:     "x x x . x x x x",
		cocoonbox.BoxStateDeleted:      "x x x x x x x x",
		cocoonbox.BoxStateFailed:       ". . x . x . . .",
	}
	for state, row := range want {
		w := &box{st: BoxCarriedState{State: state}}
		var got []string
		for _, u := range updates {
			mark := "."
			if err := w.allowed(u); err != nil {
				mark = "x"
				require.ErrorContains(t, err, "cannot "+u+" a ", "refusal of %s in %s", u, state)
			}
			got = append(got, mark)
		}
		require.Equal(t, row, strings.Join(got, " "), "state %s (%v)", state, updates)
	}
}

// TestSetNetwork: an internet box's policy becomes an allow-list on its sandbox at once and stays
// the box's; a box cannot lose (or gain) its NIC; a malformed policy is refused before history; and
// a policy the engine refuses leaves the old one.
func TestSetNetwork(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	var applied []cocoonbox.Network
	failNext := false
	env.OnActivity(sb.SetEgress, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.SetEgressInput) error {
		if failNext {
			failNext = false
			return temporal.NewNonRetryableApplicationError("engine says no", activities.ErrTypeInvalidArgument, nil)
		}
		require.Equal(t, "sb-1", in.SandboxID)
		applied = append(applied, in.Network)
		return nil
	})
	allow := cocoonbox.Network{Policy: cocoonbox.NetworkAllow, Allow: []string{"198.18.0.1:443"}}
	update(env, 0, UpdateCreate, CreateInput{})
	set := update(env, time.Second, UpdateSetNetwork, SetNetworkInput{Network: allow})
	none := update(env, 2*time.Second, UpdateSetNetwork, SetNetworkInput{Network: cocoonbox.Network{Policy: cocoonbox.NetworkNone}})
	bad := update(env, 3*time.Second, UpdateSetNetwork, SetNetworkInput{Network: cocoonbox.Network{Policy: cocoonbox.NetworkAllow}})
	env.RegisterDelayedCallback(func() { failNext = true }, 4*time.Second)
	refused := update(env, 5*time.Second, UpdateSetNetwork, SetNetworkInput{Network: cocoonbox.Network{Policy: cocoonbox.NetworkInternet}})
	deleteAt(env, time.Minute)

	in := input()
	in.Policy.Network = cocoonbox.Network{Policy: cocoonbox.NetworkInternet}
	env.ExecuteWorkflow(BoxWorkflow, in)
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, set.err)
	require.Equal(t, allow, set.status.Policy.Network)
	require.Equal(t, []cocoonbox.Network{allow}, applied)
	require.ErrorContains(t, none.rejected, "fixed at its create")
	require.ErrorContains(t, bad.rejected, "needs at least one destination")
	require.ErrorContains(t, refused.err, "engine says no")
	require.Equal(t, allow, refused.status.Policy.Network, "a refused policy leaves the old one")
}

// TestSetPolicyChangesOnlyWhatItNames: a policy change sets the fields it carries and keeps the
// others; an older full input still replaces them all; a negative idle is refused naming it;
// a shorter idle period takes effect on the running box at once.
func TestSetPolicyChangesOnlyWhatItNames(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	hibernates(env, nil, nil).Once()
	update(env, 0, UpdateCreate, CreateInput{})
	keep := 3
	onlyKeep := update(env, time.Minute, UpdateSetPolicy, SetPolicyInput{KeepSnapshots: &keep})
	neg := -time.Second
	bad := update(env, 2*time.Minute, UpdateSetPolicy, SetPolicyInput{IdleAfter: &neg})
	all := update(env, 3*time.Minute, UpdateSetPolicy, SetAll(Policy{IdleAfter: 2 * time.Minute, KeepSnapshots: 7}))
	var at6 Status
	env.RegisterDelayedCallback(func() { at6 = query(t, env) }, 6*time.Minute)
	deleteAt(env, 20*time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, idleInput())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, onlyKeep.err)
	require.Equal(t, Policy{IdleAfter: 10 * time.Minute, KeepSnapshots: 3}, onlyKeep.status.Policy)
	badErr := bad.rejected
	if badErr == nil {
		badErr = bad.err
	}
	require.ErrorContains(t, badErr, "idle: must not be negative")
	require.NoError(t, all.err)
	require.Equal(t, Policy{IdleAfter: 2 * time.Minute, KeepSnapshots: 7}, all.status.Policy)
	require.Equal(t, cocoonbox.BoxStateHibernated, at6.State, "the 2 min idle period counts from the change")
}

// TestSandboxLostRenewsAtOnce: told that the node holding its sandbox is lost, a running box
// renews its lease at once instead of at two thirds of it; the renewal finds the sandbox gone and
// the box fails, so its next use brings it back. A signal about another sandbox changes nothing.
func TestSandboxLostRenewsAtOnce(t *testing.T) {
	env := newEnv(t)
	start := env.Now()
	claimOK(env, 1, "sb-1") // one-hour lease: the planned renewal is at 40 min
	var renewedAt []time.Duration
	env.OnActivity(sb.Renew, mock.Anything, mock.Anything).Return(
		func(_ context.Context, _ activities.RenewInput) (activities.RenewResult, error) {
			renewedAt = append(renewedAt, env.Now().Sub(start))
			return activities.RenewResult{}, temporal.NewNonRetryableApplicationError("node node-b that held it is lost", activities.ErrTypeSandboxGone, nil)
		})
	update(env, 0, UpdateCreate, CreateInput{})
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(SignalSandboxLost, SandboxLostSignal{SandboxID: "sb-0", Node: "node-a"})
	}, 5*time.Minute)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(SignalSandboxLost, SandboxLostSignal{SandboxID: "sb-1", Node: "node-b"})
	}, 10*time.Minute)
	var after Status
	env.RegisterDelayedCallback(func() { after = query(t, env) }, 11*time.Minute)
	deleteAt(env, time.Hour)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NotEmpty(t, renewedAt)
	require.InDelta(t, (10 * time.Minute).Seconds(), renewedAt[0].Seconds(), 1, "renewed when told, not at 40 min nor at the signal about another sandbox")
	require.Equal(t, cocoonbox.BoxStateFailed, after.State)
	require.Empty(t, after.SandboxID)
	require.Contains(t, after.LastError, "node node-b that held it is lost")
}
