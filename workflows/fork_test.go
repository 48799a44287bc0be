package workflows

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

// TestForkKeepsCheckpointUntilClaimed: a fork update checkpoints the box with its memory and
// keeps the checkpoint until each fork said it claimed from it; one whose forks never say so
// goes when ForkCheckpointTTL has passed.
func TestForkKeepsCheckpointUntilClaimed(t *testing.T) {
	env, _, events := newEnvRecorded(t)
	claimOK(env, 1, "sb-1")
	n := 0
	env.OnActivity(snap.CheckpointForFork, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ForkCheckpointInput) (activities.ForkCheckpointResult, error) {
			require.Equal(t, activities.ForkCheckpointInput{BoxID: testBox, SandboxID: "sb-1", Name: ForkCheckpointName("bx_f" + string(rune('0'+n)))}, in)
			n++
			return activities.ForkCheckpointResult{ID: "ck_" + string(rune('0'+n)), Node: "node-a", Paused: 80 * time.Millisecond}, nil
		}).Times(2)
	dropped := map[string]time.Duration{}
	start := env.Now()
	env.OnActivity(snap.DropForkCheckpoint, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.DropForkCheckpointInput) error {
			require.Equal(t, "node-a", in.Node)
			dropped[in.CheckpointID] = env.Now().Sub(start)
			return nil
		})

	update(env, 0, UpdateCreate, CreateInput{})
	first := &outcome{}
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateFork, "f0", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { first.rejected = err }, OnAccept: func() {},
			OnComplete: func(v any, err error) { first.err, first.done = err, true },
		}, ForkInput{ForkID: "bx_f0", Count: 2, By: "alice"})
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateFork, "f1", &testsuite.TestUpdateCallback{OnReject: func(error) {}, OnAccept: func() {}, OnComplete: func(any, error) {}},
			ForkInput{ForkID: "bx_f1", Count: 1})
	}, 2*time.Second)
	tooMany := update(env, 3*time.Second, UpdateFork, ForkInput{ForkID: "bx_f2", Count: MaxForks + 1})
	for _, at := range []time.Duration{time.Minute, 2 * time.Minute} {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalForkClaimed, ForkClaimedSignal{CheckpointID: "ck_1"}) }, at)
	}
	deleteAt(env, 15*time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, first.rejected)
	require.NoError(t, first.err)
	require.ErrorContains(t, tooMany.rejected, "count: must be from 1 to 8")
	require.InDelta(t, (2 * time.Minute).Seconds(), dropped["ck_1"].Seconds(), 1, "the checkpoint goes once both its forks claimed")
	require.InDelta(t, (2*time.Second + ForkCheckpointTTL).Seconds(), dropped["ck_2"].Seconds(), 1, "a checkpoint no fork claimed from goes after its time")
	require.Contains(t, *events, "forked: 2 fork(s) from checkpoint ck_1 for alice, the box paused 80ms")
}

// TestForkClaimsFromParent: a fork's create claims from its parent's checkpoint, not from the
// template, and tells the parent, which is signalled whatever the claim's outcome.
func TestForkClaimsFromParent(t *testing.T) {
	for _, fails := range []bool{false, true} {
		env, states := newEnvStates(t)
		at := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
		in := input()
		in.Fork = &ForkOrigin{Parent: "bx_00000000000000aa", CheckpointID: "ck_1", Node: "node-a", At: at}
		env.OnActivity(snap.ClaimFork, mock.Anything, mock.Anything).Return(
			func(_ context.Context, got activities.ClaimForkInput) (activities.ClaimResult, error) {
				require.Equal(t, activities.ClaimForkInput{BoxID: testBox, Attempt: 1, CheckpointID: "ck_1", Node: "node-a", Name: "dev"}, got)
				if fails {
					return activities.ClaimResult{}, activities.ClaimForkGone("ck_1")
				}
				return activities.ClaimResult{SandboxID: "sb-9", Node: "node-a", Deadline: env.Now().Add(time.Hour)}, nil
			})
		var told []string
		env.OnSignalExternalWorkflow(mock.Anything, BoxWorkflowID("bx_00000000000000aa"), "", SignalForkClaimed, mock.Anything).Return(
			func(_, _, _, _ string, arg any) error {
				told = append(told, arg.(ForkClaimedSignal).CheckpointID)
				return nil
			})
		create := update(env, 0, UpdateCreate, CreateInput{})
		deleteAt(env, 10*time.Minute)

		env.ExecuteWorkflow(BoxWorkflow, in)
		require.NoError(t, env.GetWorkflowError())
		require.Equal(t, []string{"ck_1"}, told)
		env.AssertActivityNumberOfCalls(t, "Claim", 0)
		env.AssertActivityNumberOfCalls(t, "WaitReady", 0)
		if fails {
			require.ErrorContains(t, create.err, "checkpoint ck_1 is gone")
			require.Contains(t, *states, cocoonbox.BoxStateFailed)
			continue
		}
		require.NoError(t, create.err)
		require.Equal(t, cocoonbox.BoxStateRunning, create.status.State)
		require.Equal(t, "sb-9", create.status.SandboxID)
	}
}

// TestForkElsewhereWhenParentNodeFull: a fork whose parent's node has no room is not claimed
// there again: the disk of its checkpoint becomes its first snapshot, uploaded on the parent's
// node, which is restored where placement puts it with the fork's own identity; the parent is
// told only once the upload is done, and the fork's events say it has no memory.
func TestForkElsewhereWhenParentNodeFull(t *testing.T) {
	env, _, events := newEnvRecorded(t)
	at := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
	in := input()
	in.Fork = &ForkOrigin{Parent: "bx_00000000000000aa", CheckpointID: "ck_1", Node: "node-a", At: at}
	var order []string
	env.OnActivity(snap.ClaimFork, mock.Anything, mock.Anything).Return(
		func(context.Context, activities.ClaimForkInput) (activities.ClaimResult, error) {
			order = append(order, "claim")
			return activities.ClaimResult{}, temporal.NewApplicationError("no capacity: node-a runs its 1 sandbox", activities.ErrTypeNoCapacity)
		})
	env.OnActivity(snap.BeginSnapshot, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.BeginSnapshotInput) (cocoonbox.Snapshot, error) {
			return cocoonbox.Snapshot{ID: in.SnapshotID, BoxID: in.BoxID}, nil
		})
	env.OnActivity(snap.UploadForkDisk, mock.Anything, mock.Anything).Return(
		func(_ context.Context, got activities.UploadForkDiskInput) (activities.UploadSnapshotResult, error) {
			order = append(order, "upload")
			require.Equal(t, "ck_1", got.CheckpointID)
			require.Equal(t, "node-a", got.Node)
			require.Equal(t, at, got.At)
			return activities.UploadSnapshotResult{Bytes: 1, SHA256: "x", Files: 1}, nil
		})
	env.OnActivity(snap.CompleteSnapshot, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.CompleteSnapshotInput) (cocoonbox.Snapshot, error) {
			return cocoonbox.Snapshot{ID: in.SnapshotID, BoxID: testBox, State: cocoonbox.SnapshotComplete}, nil
		})
	env.OnActivity(snap.RestoreSnapshot, mock.Anything, mock.Anything).Return(
		func(_ context.Context, got activities.RestoreSnapshotInput) (activities.RestoreSnapshotResult, error) {
			order = append(order, "restore")
			require.True(t, got.Reseed)
			require.Equal(t, "dev", got.Name)
			return activities.RestoreSnapshotResult{SnapshotID: got.SnapshotID, SandboxID: "sb-b", Node: "node-b", Deadline: env.Now().Add(time.Hour)}, nil
		})
	env.OnSignalExternalWorkflow(mock.Anything, BoxWorkflowID("bx_00000000000000aa"), "", SignalForkClaimed, mock.Anything).Return(
		func(_, _, _, _ string, arg any) error {
			order = append(order, "told "+arg.(ForkClaimedSignal).CheckpointID)
			return nil
		})
	create := update(env, 0, UpdateCreate, CreateInput{})
	deleteAt(env, 10*time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, in)
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, create.err)
	require.Equal(t, cocoonbox.BoxStateRunning, create.status.State)
	require.Equal(t, "sb-b", create.status.SandboxID)
	require.Equal(t, []string{"claim", "upload", "restore", "told ck_1"}, order, "one claim there, not retried; the parent told after the upload")
	require.True(t, slices.ContainsFunc(*events, func(e string) bool {
		return strings.HasPrefix(e, "forked_without_memory: from bx_00000000000000aa") && strings.Contains(e, "on node node-b")
	}), "events %q", *events)
}
