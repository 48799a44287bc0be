package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

// restoresFrom mocks the restore of the snapshot the move just took onto sandbox id, checking it
// names that snapshot (not "" the newest, which a seal could have made meanwhile).
func restoresFrom(env *testsuite.TestWorkflowEnvironment, calls *[]string, id string, err error) {
	env.OnActivity(snap.RestoreSnapshot, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.RestoreSnapshotInput) (activities.RestoreSnapshotResult, error) {
			*calls = append(*calls, "restore "+in.SnapshotID)
			if in.SnapshotID == "" {
				return activities.RestoreSnapshotResult{}, errors.New("the move restored the newest snapshot, not its own")
			}
			return activities.RestoreSnapshotResult{SnapshotID: in.SnapshotID, SandboxID: id}, err
		})
}

// hasEvent reports whether events holds one of kind.
func hasEvent(events []string, kind string) bool {
	for _, e := range events {
		if strings.HasPrefix(e, kind+": ") {
			return true
		}
	}
	return false
}

// TestMoveRunningBox: a running box asked to leave a draining node is snapshotted and restored
// from that snapshot onto a new sandbox (placed by the restore), the old one released after; its
// events say what was kept.
func TestMoveRunningBox(t *testing.T) {
	env, _, events := newEnvRecorded(t)
	claimOK(env, 1, "sb-1")
	calls := snapshotsOK(env, nil)
	restoresFrom(env, calls, "sb-2", nil)
	var released []string
	env.OnActivity(sb.Release, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.SandboxInput) error {
		released = append(released, in.SandboxID)
		return nil
	})
	update(env, 0, UpdateCreate, CreateInput{})
	bad := update(env, time.Second, UpdateMove, MoveInput{})
	moved := update(env, 2*time.Second, UpdateMove, MoveInput{From: "node-a"})
	update(env, time.Minute, UpdateDelete, DeleteInput{})

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.Error(t, bad.rejected, "a move that names no node is refused")
	require.NoError(t, moved.err)
	require.True(t, moved.move.Moved)
	require.Equal(t, cocoonbox.BoxStateRunning, moved.status.State)
	require.Equal(t, "sb-2", moved.status.SandboxID)
	require.Equal(t, []string{"begin", "upload sb-1", "complete", "prune", "restore " + moved.status.LastSnapshot}, *calls)
	require.Equal(t, []string{"sb-1", "sb-2"}, released, "the old sandbox goes after the move, the new one at delete")
	require.True(t, hasEvent(*events, "moved"), "events: %v", *events)
}

// TestMoveFailureKeepsBox: a move whose restore fails leaves the box running on its sandbox,
// saying why.
func TestMoveFailureKeepsBox(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	calls := snapshotsOK(env, nil)
	restoresFrom(env, calls, "", temporal.NewNonRetryableApplicationError("no node has room", activities.ErrTypeNoCapacity, nil))
	update(env, 0, UpdateCreate, CreateInput{})
	moved := update(env, time.Second, UpdateMove, MoveInput{From: "node-a"})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.Error(t, moved.err)
	require.Equal(t, cocoonbox.BoxStateRunning, moved.status.State)
	require.Equal(t, "sb-1", moved.status.SandboxID)
	require.Contains(t, moved.status.LastError, "move: ")
}

// TestMoveHibernatedBoxOnWake: a hibernated box keeps sleeping on the draining node; its next
// wake wakes it there and then moves it.
func TestMoveHibernatedBoxOnWake(t *testing.T) {
	env, _, events := newEnvRecorded(t)
	claimOK(env, 1, "sb-1")
	hibernates(env, nil, nil).Once()
	calls := snapshotsOK(env, nil)
	restoresFrom(env, calls, "sb-2", nil)
	env.OnActivity(sb.Wake, mock.Anything, activities.SandboxInput{BoxID: testBox, SandboxID: "sb-1"}).Return(nil).Once()
	update(env, 0, UpdateCreate, CreateInput{})
	update(env, time.Second, UpdateHibernate, HibernateInput{})
	later := update(env, 2*time.Second, UpdateMove, MoveInput{From: "node-a"})
	woke := update(env, 3*time.Second, UpdateWake, WakeInput{})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, later.err)
	require.True(t, later.move.OnWake)
	require.Equal(t, cocoonbox.BoxStateHibernated, later.status.State, "a sleeping box is not woken by the drain")
	require.NoError(t, woke.err)
	require.Equal(t, cocoonbox.BoxStateRunning, woke.status.State)
	require.Equal(t, "sb-2", woke.status.SandboxID, "the wake moved the box")
	require.True(t, hasEvent(*events, "move-on-wake") && hasEvent(*events, "moved"), "events: %v", *events)
	env.AssertExpectations(t)
}

// TestMoveOwedEndsWithItsSandbox: a hibernated box owed a move whose sandbox is gone by its wake
// (its node lost) is rebuilt by placement from its newest snapshot and is not moved again.
func TestMoveOwedEndsWithItsSandbox(t *testing.T) {
	env, _, events := newEnvRecorded(t)
	claimOK(env, 1, "sb-1")
	hibernates(env, nil, nil).Once()
	calls := snapshotsOK(env, nil)
	env.OnActivity(sb.Wake, mock.Anything, mock.Anything).
		Return(temporal.NewNonRetryableApplicationError("gone", activities.ErrTypeSandboxGone, nil)).Once()
	env.OnActivity(snap.RestoreSnapshot, mock.Anything, mock.Anything).
		Return(activities.RestoreSnapshotResult{SnapshotID: "sn_00000000000000aa", SandboxID: "sb-2", Node: "node-c"}, nil).Once()
	update(env, 0, UpdateCreate, CreateInput{})
	update(env, time.Second, UpdateHibernate, HibernateInput{})
	update(env, 2*time.Second, UpdateMove, MoveInput{From: "node-a"})
	woke := update(env, 3*time.Second, UpdateWake, WakeInput{})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, woke.err)
	require.Equal(t, "sb-2", woke.status.SandboxID)
	require.Empty(t, *calls, "no snapshot was taken to move a box already rebuilt elsewhere")
	require.False(t, hasEvent(*events, "moved"), "events: %v", *events)
	env.AssertExpectations(t)
}

// TestDrainWorkflow: a drain moves each box its node holds, one at a time, and says what became
// of each.
func TestDrainWorkflow(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(testLogger(t))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(DrainWorkflow)
	var drain *activities.Drain
	env.RegisterActivity(drain)
	env.OnActivity(drain.NodeBoxes, mock.Anything, "node-a").Return([]activities.NodeBox{
		{Box: "bx_000000000000000a"}, {Box: "bx_000000000000000b"}, {Box: "bx_000000000000000c"}, {Box: "bx_000000000000000d"},
	}, nil)
	env.OnActivity(drain.MoveBox, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.MoveBoxInput) (activities.MoveBoxResult, error) {
			switch in.Box {
			case "bx_000000000000000a":
				return activities.MoveBoxResult{Moved: true}, nil
			case "bx_000000000000000b":
				return activities.MoveBoxResult{OnWake: true}, nil
			case "bx_000000000000000c":
				return activities.MoveBoxResult{}, temporal.NewNonRetryableApplicationError("no node has room", activities.ErrTypeNoCapacity, nil)
			}
			return activities.MoveBoxResult{}, nil // left the node meanwhile
		})
	env.ExecuteWorkflow(DrainWorkflow, DrainInput{Node: "node-a"})
	require.NoError(t, env.GetWorkflowError())
	var out DrainResult
	require.NoError(t, env.GetWorkflowResult(&out))
	require.Equal(t, []cocoonbox.BoxID{"bx_000000000000000a"}, out.Moved)
	require.Equal(t, []cocoonbox.BoxID{"bx_000000000000000b"}, out.OnWake)
	require.Len(t, out.Failed, 1)
	require.Equal(t, cocoonbox.BoxID("bx_000000000000000c"), out.Failed[0].Box)
	require.Contains(t, out.Failed[0].Reason, "no node has room")
}

// TestSnapshotExportedOnItsNode: a box whose claim named its node is exported on that node's own
// queue, where the node's worker runs beside its engine. (That any worker takes it after
// nodeQueueWait when none there does is TestSnapshotWithoutNodeWorker's, on a real server: the
// test environment has no schedule-to-start timeout.)
func TestSnapshotExportedOnItsNode(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(sb.Claim, mock.Anything, mock.Anything).Return(activities.ClaimResult{SandboxID: "sb-1", Node: "node-b"}, nil).Once()
	snapshotsOK(env, nil)
	queues := queuesOf(env, "UploadSnapshot")
	update(env, 0, UpdateCreate, CreateInput{})
	snapped := update(env, time.Second, UpdateSnapshot, SnapshotInput{})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, snapped.err)
	require.Equal(t, []string{NodeTaskQueue("node-b")}, *queues)
}

// TestRestoreRunsOnPlacedNode: a restore is placed first and runs on the chosen node's queue,
// told the node, so the object streams into the engine beside that node's worker.
func TestRestoreRunsOnPlacedNode(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	placedOn(env, "node-c")
	env.OnActivity(snap.RestoreSnapshot, mock.Anything, mock.MatchedBy(func(in activities.RestoreSnapshotInput) bool {
		return in.Node == "node-c"
	})).Return(activities.RestoreSnapshotResult{SnapshotID: "sn_00000000000000aa", SandboxID: "sb-2", Node: "node-c"}, nil).Once()
	queues := queuesOf(env, "RestoreSnapshot")
	update(env, 0, UpdateCreate, CreateInput{})
	restored := update(env, time.Second, UpdateRestore, RestoreInput{SnapshotID: "sn_00000000000000aa"})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, restored.err)
	require.Equal(t, "sb-2", restored.status.SandboxID)
	require.Equal(t, []string{NodeTaskQueue("node-c")}, *queues)
}

// TestDrainWorkflowParallel: a drain told to move three boxes at once has three moves under way
// while boxes remain, never more, and lists the moved boxes in the node's order.
func TestDrainWorkflowParallel(t *testing.T) {
	for _, c := range []struct{ parallel, want int }{{0, 1}, {3, 3}} {
		var s testsuite.WorkflowTestSuite
		s.SetLogger(testLogger(t))
		env := s.NewTestWorkflowEnvironment()
		env.RegisterWorkflow(DrainWorkflow)
		var drain *activities.Drain
		env.RegisterActivity(drain)
		var boxes []activities.NodeBox
		var ids []cocoonbox.BoxID
		for i := range 7 {
			id := cocoonbox.BoxID(fmt.Sprintf("bx_%016x", i+1))
			boxes, ids = append(boxes, activities.NodeBox{Box: id}), append(ids, id)
		}
		env.OnActivity(drain.NodeBoxes, mock.Anything, "node-a").Return(boxes, nil)
		var mu sync.Mutex
		active, started, most := 0, 0, 0
		env.OnActivity(drain.MoveBox, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in activities.MoveBoxInput) (activities.MoveBoxResult, error) {
				mu.Lock()
				active++
				started++
				mu.Unlock()
				// Each move waits until the window is full (or no box is left to start), so the
				// moves the drain runs at once are all under way together here; a drain that
				// runs fewer leaves this waiting until the deadline.
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					mu.Lock()
					full := active >= c.want || started == len(boxes)
					most = max(most, active)
					mu.Unlock()
					if full {
						break
					}
				}
				mu.Lock()
				active--
				mu.Unlock()
				return activities.MoveBoxResult{Moved: true}, nil
			})
		env.ExecuteWorkflow(DrainWorkflow, DrainInput{Node: "node-a", Parallel: c.parallel})
		require.NoError(t, env.GetWorkflowError())
		var out DrainResult
		require.NoError(t, env.GetWorkflowResult(&out))
		require.Equal(t, ids, out.Moved, "parallel %d", c.parallel)
		require.Equal(t, c.want, most, "moves under way at once with parallel %d", c.parallel)
	}
}

// queuesOf records the task queue each activity called name was started on, in order.
func queuesOf(env *testsuite.TestWorkflowEnvironment, name string) *[]string {
	var queues []string
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == name {
			queues = append(queues, info.TaskQueue)
		}
	})
	return &queues
}

// TestQuickRetriesOnItsNode: a hibernate and a wake of a box on a node (as its ready probe, by
// the same helper) are tried first where the workflow runs, and, when that try fails with an error
// another may change, again on the queue of the node that holds the box, beside its engine.
func TestQuickRetriesOnItsNode(t *testing.T) {
	env := newEnv(t)
	busy := temporal.NewApplicationError("the engine is busy", activities.ErrTypeUnavailable)
	env.OnActivity(sb.Claim, mock.Anything, mock.Anything).Return(activities.ClaimResult{SandboxID: "sb-1", Node: "node-b"}, nil).Once()
	failsOnce := func() func() error {
		tries := 0
		return func() error {
			if tries++; tries == 1 {
				return busy
			}
			return nil
		}
	}
	hib, wake := failsOnce(), failsOnce()
	hibernates(env, nil, func(activities.SandboxInput) error { return hib() })
	env.OnActivity(sb.Wake, mock.Anything, mock.Anything).Return(func(context.Context, activities.SandboxInput) error { return wake() })
	var queues []string
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		queues = append(queues, info.ActivityType.Name+" "+info.TaskQueue)
	})
	update(env, 0, UpdateCreate, CreateInput{})
	hibernated := update(env, time.Second, UpdateHibernate, HibernateInput{})
	woke := update(env, 2*time.Second, UpdateWake, WakeInput{})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, hibernated.err)
	require.NoError(t, woke.err)
	onNode := NodeTaskQueue("node-b")
	require.Equal(t, []string{"HibernateRecorded " + onNode, "Wake " + onNode}, slices.DeleteFunc(queues, func(q string) bool {
		return strings.HasPrefix(q, "Release ")
	}))
}
