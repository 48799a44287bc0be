package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
)

// snapshotsOK mocks the snapshot child's activities to succeed, recording the calls in order.
// A non-nil uploadErr fails the upload instead.
func snapshotsOK(env *testsuite.TestWorkflowEnvironment, uploadErr error) *[]string {
	var calls []string
	env.OnActivity(snap.BeginSnapshot, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.BeginSnapshotInput) (cocoonbox.Snapshot, error) {
			calls = append(calls, "begin")
			return cocoonbox.Snapshot{ID: in.SnapshotID, BoxID: in.BoxID, State: cocoonbox.SnapshotUploading}, nil
		}).Maybe()
	env.OnActivity(snap.UploadSnapshot, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.UploadSnapshotInput) (activities.UploadSnapshotResult, error) {
			calls = append(calls, "upload "+in.SandboxID)
			return activities.UploadSnapshotResult{Bytes: 10, SHA256: "ab", Files: 2}, uploadErr
		}).Maybe()
	env.OnActivity(snap.CompleteSnapshot, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.CompleteSnapshotInput) (cocoonbox.Snapshot, error) {
			calls = append(calls, "complete")
			return cocoonbox.Snapshot{ID: in.SnapshotID, BoxID: testBox, State: cocoonbox.SnapshotComplete,
				Bytes: in.Bytes, SHA256: in.SHA256, Files: in.Files}, nil
		}).Maybe()
	env.OnActivity(snap.PruneSnapshots, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.PruneSnapshotsInput) (activities.PruneSnapshotsResult, error) {
			if in.All {
				calls = append(calls, "purge")
			} else {
				calls = append(calls, "prune")
			}
			return activities.PruneSnapshotsResult{}, nil
		}).Maybe()
	return &calls
}

func TestSnapshotUpdate(t *testing.T) {
	env, states := newEnvStates(t)
	claimOK(env, 1, "sb-1")
	calls := snapshotsOK(env, nil)
	update(env, 0, UpdateCreate, CreateInput{})
	taken := update(env, time.Second, UpdateSnapshot, SnapshotInput{})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, taken.err)
	id := taken.snapshot.Snapshot.ID
	require.NoError(t, cocoonbox.ValidateSnapshotID("id", id))
	require.Equal(t, cocoonbox.SnapshotComplete, taken.snapshot.Snapshot.State)
	require.Equal(t, cocoonbox.BoxStateRunning, taken.status.State)
	require.Equal(t, id, taken.status.LastSnapshot)
	require.Equal(t, []string{"begin", "upload sb-1", "complete", "prune"}, *calls)
	require.Contains(t, *states, cocoonbox.BoxStateSnapshotting)
}

func TestSnapshotFailureCleansUp(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	calls := snapshotsOK(env, temporal.NewNonRetryableApplicationError("engine cannot export", activities.ErrTypeInvalidArgument, nil))
	var failed []string
	env.OnActivity(snap.FailSnapshot, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.SnapshotRef) error {
		failed = append(failed, in.SnapshotID)
		return nil
	})
	update(env, 0, UpdateCreate, CreateInput{})
	taken := update(env, time.Second, UpdateSnapshot, SnapshotInput{})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.Error(t, taken.err)
	require.Equal(t, cocoonbox.BoxStateRunning, taken.status.State, "a failed snapshot leaves the box running")
	require.Empty(t, taken.status.LastSnapshot)
	require.Contains(t, taken.status.LastError, "engine cannot export")
	require.Len(t, failed, 1, "the failed snapshot is cleaned up")
	require.NotContains(t, *calls, "complete")
	require.NotContains(t, *calls, "prune")
}

func TestSnapshotOfHibernatedBoxSleepsAgain(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	calls := snapshotsOK(env, nil)
	hibernates(env, nil, nil).Once()
	env.OnActivity(sb.Hibernate, mock.Anything, mock.Anything).Return(nil).Once() // after the snapshot
	update(env, 0, UpdateCreate, CreateInput{})
	update(env, time.Second, UpdateHibernate, HibernateInput{})
	taken := update(env, 2*time.Second, UpdateSnapshot, SnapshotInput{})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, taken.err)
	require.Equal(t, cocoonbox.BoxStateHibernated, taken.status.State)
	require.Contains(t, *calls, "complete")
	env.AssertExpectations(t)
}

func TestSnapshotRejectedWhileCreatingOrFailed(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(sb.Claim, mock.Anything, mock.Anything).
		Return(activities.ClaimResult{}, temporal.NewNonRetryableApplicationError("bad", activities.ErrTypeInvalidArgument, nil))
	update(env, 0, UpdateCreate, CreateInput{})
	taken := update(env, time.Second, UpdateSnapshot, SnapshotInput{})
	bad := update(env, 2*time.Second, UpdateRestore, RestoreInput{SnapshotID: "latest"})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.Error(t, taken.rejected)
	require.Contains(t, taken.rejected.Error(), "failed box")
	require.Error(t, bad.rejected)
	require.Contains(t, bad.rejected.Error(), "snapshot_id")
}

func TestWakeRestoresNewestSnapshot(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	hibernates(env, nil, nil)
	env.OnActivity(sb.Hibernate, mock.Anything, mock.Anything).Return(nil).Maybe()
	env.OnActivity(sb.Wake, mock.Anything, mock.Anything).
		Return(temporal.NewNonRetryableApplicationError("gone", activities.ErrTypeSandboxGone, nil)).Once()
	env.OnActivity(snap.RestoreSnapshot, mock.Anything, mock.MatchedBy(func(in activities.RestoreSnapshotInput) bool {
		return in.SnapshotID == "" && in.Attempt == 2
	})).Return(activities.RestoreSnapshotResult{SnapshotID: "sn_00000000000000aa", SandboxID: "sb-2", TakenAt: env.Now().Add(-12 * time.Minute)}, nil).Once()
	update(env, 0, UpdateCreate, CreateInput{})
	update(env, time.Second, UpdateHibernate, HibernateInput{})
	wake := update(env, 2*time.Second, UpdateWake, WakeInput{})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, wake.err)
	require.Equal(t, cocoonbox.BoxStateRunning, wake.status.State)
	require.Equal(t, "sb-2", wake.status.SandboxID)
	require.Equal(t, "sn_00000000000000aa", wake.status.LastSnapshot)
	require.Equal(t, "sn_00000000000000aa", wake.status.RestoredFrom.SnapshotID, "the box says what it was rebuilt from")
	require.False(t, wake.status.RestoredFrom.TakenAt.IsZero())
	env.AssertActivityNumberOfCalls(t, "Claim", 1) // rebuilt from the snapshot, not the template
	env.AssertExpectations(t)
}

func TestRestoreSwapsSandbox(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	env.OnActivity(snap.RestoreSnapshot, mock.Anything, mock.Anything).
		Return(activities.RestoreSnapshotResult{SnapshotID: "sn_00000000000000bb", SandboxID: "sb-2"}, nil).Once()
	var released []string
	env.OnActivity(sb.Release, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.SandboxInput) error {
		released = append(released, in.SandboxID)
		return nil
	})
	update(env, 0, UpdateCreate, CreateInput{})
	restored := update(env, time.Second, UpdateRestore, RestoreInput{SnapshotID: "sn_00000000000000bb"})
	update(env, time.Minute, UpdateDelete, DeleteInput{})

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, restored.err)
	require.Equal(t, cocoonbox.BoxStateRunning, restored.status.State)
	require.Equal(t, "sb-2", restored.status.SandboxID)
	require.Equal(t, []string{"sb-1", "sb-2"}, released, "the old sandbox goes after the swap, the new one at delete")
}

// TestRestoreAnswersBeforeTheOldSandboxIsReleased: releasing the sandbox a restore replaced is
// cleanup, so the restore answers without waiting for it, and the box does not complete while
// the release is under way (drain, which continue-as-new waits on too).
func TestRestoreAnswersBeforeTheOldSandboxIsReleased(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	env.OnActivity(snap.RestoreSnapshot, mock.Anything, mock.Anything).
		Return(activities.RestoreSnapshotResult{SnapshotID: "sn_00000000000000bb", SandboxID: "sb-2"}, nil).Once()
	const slow = 10 * time.Minute
	var oldGone time.Time
	env.OnActivity(sb.Release, mock.Anything, activities.SandboxInput{BoxID: testBox, SandboxID: "sb-1"}).After(slow).
		Return(func(context.Context, activities.SandboxInput) error { oldGone = env.Now(); return nil }).Once()
	env.OnActivity(sb.Release, mock.Anything, activities.SandboxInput{BoxID: testBox, SandboxID: "sb-2"}).Return(nil).Once()
	update(env, 0, UpdateCreate, CreateInput{})
	restored := update(env, time.Second, UpdateRestore, RestoreInput{SnapshotID: "sn_00000000000000bb"})
	deleted := update(env, 2*time.Second, UpdateDelete, DeleteInput{})

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, restored.err)
	require.Equal(t, cocoonbox.BoxStateRunning, restored.status.State)
	require.Equal(t, "sb-2", restored.status.SandboxID)
	require.False(t, oldGone.IsZero(), "the replaced sandbox is released")
	require.True(t, restored.at.Before(oldGone), "the restore answered at %s, after the old sandbox's release ended at %s", restored.at, oldGone)
	require.NoError(t, deleted.err)
	require.False(t, env.Now().Before(oldGone), "the workflow ended at %s, before the release under way ended at %s", env.Now(), oldGone)
	env.AssertExpectations(t)
}

func TestCorruptRestoreKeepsBox(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	env.OnActivity(snap.RestoreSnapshot, mock.Anything, mock.Anything).Return(activities.RestoreSnapshotResult{},
		temporal.NewNonRetryableApplicationError("snapshot sn_00000000000000cc of box x is corrupt", activities.ErrTypeSnapshotCorrupt, nil)).Once()
	update(env, 0, UpdateCreate, CreateInput{})
	restored := update(env, time.Second, UpdateRestore, RestoreInput{})
	after := update(env, 2*time.Second, UpdateWake, WakeInput{})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.Error(t, restored.err)
	require.Equal(t, activities.ErrTypeSnapshotCorrupt, errorType(restored.err))
	require.Equal(t, cocoonbox.BoxStateRunning, restored.status.State)
	require.Equal(t, "sb-1", restored.status.SandboxID, "the box keeps its current sandbox")
	require.Contains(t, restored.status.LastError, "sn_00000000000000cc")
	require.NoError(t, after.err)
	env.AssertActivityNumberOfCalls(t, "RestoreSnapshot", 1) // a corrupt snapshot is not retried
}

func TestDurableHibernate(t *testing.T) {
	t.Run("seals after it sleeps", func(t *testing.T) {
		env := newEnv(t)
		claimOK(env, 1, "sb-1")
		calls := snapshotsOK(env, nil)
		hibernates(env, nil, func(activities.SandboxInput) error {
			*calls = append(*calls, "hibernate")
			return nil
		})
		env.OnActivity(sb.Hibernate, mock.Anything, mock.Anything).Return(func(context.Context, activities.SandboxInput) error {
			*calls = append(*calls, "hibernate")
			return nil
		}).Maybe()
		env.OnActivity(sb.Wake, mock.Anything, mock.Anything).Return(nil)
		env.OnActivity(sb.WaitReady, mock.Anything, mock.Anything).Return(nil)
		in := input()
		in.Policy.DurableHibernate = true
		var sealed, woken Status
		update(env, 0, UpdateCreate, CreateInput{})
		h := update(env, time.Second, UpdateHibernate, HibernateInput{})
		env.RegisterDelayedCallback(func() { sealed = query(t, env) }, 30*time.Second)
		update(env, 40*time.Second, UpdateWake, WakeInput{})
		env.RegisterDelayedCallback(func() { woken = query(t, env) }, 50*time.Second)
		deleteAt(env, time.Minute)
		env.ExecuteWorkflow(BoxWorkflow, in)
		require.NoError(t, env.GetWorkflowError())
		require.NoError(t, h.err)
		require.Equal(t, cocoonbox.BoxStateHibernated, h.status.State)
		require.Equal(t, SealSealing, h.status.Seal, "the hibernate answers before the snapshot uploads")
		require.Equal(t, []string{"hibernate", "begin", "upload sb-1", "complete", "prune"}, *calls)
		require.Equal(t, SealSealed, sealed.Seal)
		require.NotEmpty(t, sealed.LastSnapshot)
		require.Empty(t, woken.Seal, "a box that woke is no longer sealed")
		require.Equal(t, sealed.LastSnapshot, woken.LastSnapshot)
	})
	t.Run("through the agent: the sandbox it woke sleeps again, the next hibernate seals first", func(t *testing.T) {
		env := newEnv(t)
		claimOK(env, 1, "sb-1")
		var calls []string
		env.OnActivity(snap.BeginSnapshot, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in activities.BeginSnapshotInput) (cocoonbox.Snapshot, error) {
				calls = append(calls, "begin")
				return cocoonbox.Snapshot{ID: in.SnapshotID, BoxID: in.BoxID, State: cocoonbox.SnapshotUploading}, nil
			})
		env.OnActivity(snap.UploadSnapshot, mock.Anything, mock.Anything).Return(activities.UploadSnapshotResult{Bytes: 10, SHA256: "ab", Files: 2}, nil)
		env.OnActivity(snap.CompleteSnapshot, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in activities.CompleteSnapshotInput) (cocoonbox.Snapshot, error) {
				// An engine without disk export: the snapshot went through the box's agent.
				return cocoonbox.Snapshot{ID: in.SnapshotID, BoxID: testBox, State: cocoonbox.SnapshotComplete,
					Kind: cocoonbox.SnapshotKindState}, nil
			})
		env.OnActivity(snap.PruneSnapshots, mock.Anything, mock.Anything).Return(activities.PruneSnapshotsResult{}, nil)
		hibernates(env, nil, func(activities.SandboxInput) error {
			calls = append(calls, "hibernate")
			return nil
		})
		env.OnActivity(sb.Hibernate, mock.Anything, mock.Anything).Return(func(context.Context, activities.SandboxInput) error {
			calls = append(calls, "hibernate")
			return nil
		}).Maybe()
		env.OnActivity(sb.Wake, mock.Anything, mock.Anything).Return(func(context.Context, activities.SandboxInput) error {
			calls = append(calls, "wake")
			return nil
		})
		env.OnActivity(sb.WaitReady, mock.Anything, mock.Anything).Return(nil)
		in := input()
		in.Policy.DurableHibernate = true
		var sealed Status
		update(env, 0, UpdateCreate, CreateInput{})
		first := update(env, time.Second, UpdateHibernate, HibernateInput{})
		env.RegisterDelayedCallback(func() { sealed = query(t, env) }, 30*time.Second)
		update(env, 40*time.Second, UpdateWake, WakeInput{})
		second := update(env, 50*time.Second, UpdateHibernate, HibernateInput{})
		deleteAt(env, 2*time.Minute)
		env.ExecuteWorkflow(BoxWorkflow, in)
		require.NoError(t, env.GetWorkflowError())
		require.NoError(t, first.err)
		require.NoError(t, second.err)
		require.Equal(t, SealSealed, sealed.Seal)
		require.Equal(t, cocoonbox.BoxStateHibernated, second.status.State)
		require.Empty(t, second.status.Seal, "sealed before it slept: nothing uploads after")
		require.Equal(t, []string{
			"hibernate", "begin", "hibernate", // the seal after the first sleep, and the sandbox put back to sleep
			"wake",
			"begin", "hibernate", // the second hibernate seals first
		}, calls)
	})
	t.Run("a failed seal leaves the box asleep and says so", func(t *testing.T) {
		env := newEnv(t)
		claimOK(env, 1, "sb-1")
		snapshotsOK(env, temporal.NewNonRetryableApplicationError("s3 refused", activities.ErrTypeInvalidArgument, nil))
		env.OnActivity(snap.FailSnapshot, mock.Anything, mock.Anything).Return(nil)
		hibernates(env, nil, nil)
		env.OnActivity(sb.Hibernate, mock.Anything, mock.Anything).Return(nil).Maybe()
		in := input()
		in.Policy.DurableHibernate = true
		var after Status
		update(env, 0, UpdateCreate, CreateInput{})
		h := update(env, time.Second, UpdateHibernate, HibernateInput{})
		env.RegisterDelayedCallback(func() { after = query(t, env) }, 30*time.Second)
		deleteAt(env, time.Minute)
		env.ExecuteWorkflow(BoxWorkflow, in)
		require.NoError(t, env.GetWorkflowError())
		require.NoError(t, h.err)
		require.Equal(t, cocoonbox.BoxStateHibernated, after.State)
		require.Empty(t, after.Seal)
		require.Contains(t, after.LastError, "s3 refused")
		env.AssertActivityNumberOfCalls(t, "FailSnapshot", 1)
		// The hibernate, then again after the failed seal: through the agent (an engine
		// without disk export) the seal woke the sandbox, and its retry is minutes away.
		env.AssertActivityNumberOfCalls(t, "HibernateRecorded", 1)
		env.AssertActivityNumberOfCalls(t, "Hibernate", 1)
	})
}

// TestFailedSealHeals: a seal that failed is tried again after a backoff, and the box ends
// sealed once the object store answers, its error cleared.
func TestFailedSealHeals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wakeErr error  // a wake that fails between the failed seal and its retry
		after   string // the box's last error once the retry sealed it
	}{
		{"the seal's error is cleared", nil, ""},
		{"another operation's error stays", temporal.NewNonRetryableApplicationError("no capacity", activities.ErrTypeInvalidArgument, nil), "no capacity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			claimOK(env, 1, "sb-1")
			hibernates(env, nil, nil)
			env.OnActivity(sb.Hibernate, mock.Anything, mock.Anything).Return(nil).Maybe()
			env.OnActivity(sb.Wake, mock.Anything, mock.Anything).Return(tc.wakeErr).Maybe()
			env.OnActivity(snap.BeginSnapshot, mock.Anything, mock.Anything).Return(
				func(_ context.Context, in activities.BeginSnapshotInput) (cocoonbox.Snapshot, error) {
					return cocoonbox.Snapshot{ID: in.SnapshotID, BoxID: in.BoxID, State: cocoonbox.SnapshotUploading}, nil
				})
			uploads := 0
			env.OnActivity(snap.UploadSnapshot, mock.Anything, mock.Anything).Return(
				func(context.Context, activities.UploadSnapshotInput) (activities.UploadSnapshotResult, error) {
					if uploads++; uploads == 1 {
						return activities.UploadSnapshotResult{}, temporal.NewNonRetryableApplicationError("s3 down", activities.ErrTypeInvalidArgument, nil)
					}
					return activities.UploadSnapshotResult{Bytes: 10, SHA256: "ab", Files: 2}, nil
				})
			env.OnActivity(snap.CompleteSnapshot, mock.Anything, mock.Anything).Return(
				func(_ context.Context, in activities.CompleteSnapshotInput) (cocoonbox.Snapshot, error) {
					return cocoonbox.Snapshot{ID: in.SnapshotID, BoxID: testBox, State: cocoonbox.SnapshotComplete}, nil
				})
			env.OnActivity(snap.FailSnapshot, mock.Anything, mock.Anything).Return(nil)
			env.OnActivity(snap.PruneSnapshots, mock.Anything, mock.Anything).Return(activities.PruneSnapshotsResult{}, nil)
			in := input()
			in.Policy.DurableHibernate = true
			var failed, healed Status
			update(env, 0, UpdateCreate, CreateInput{})
			update(env, time.Second, UpdateHibernate, HibernateInput{})
			env.RegisterDelayedCallback(func() { failed = query(t, env) }, time.Minute)
			if tc.wakeErr != nil {
				update(env, 90*time.Second, UpdateWake, WakeInput{})
			}
			env.RegisterDelayedCallback(func() { healed = query(t, env) }, 5*time.Minute)
			deleteAt(env, 10*time.Minute)
			env.ExecuteWorkflow(BoxWorkflow, in)
			require.NoError(t, env.GetWorkflowError())
			require.Empty(t, failed.Seal)
			require.Contains(t, failed.LastError, "s3 down")
			require.Equal(t, 2, uploads, "one retry after the backoff")
			require.Equal(t, cocoonbox.BoxStateHibernated, healed.State)
			require.Equal(t, SealSealed, healed.Seal)
			if tc.after == "" {
				require.Empty(t, healed.LastError)
			} else {
				require.Contains(t, healed.LastError, tc.after)
			}
		})
	}
}

// TestPeriodicSeal: a running box active since its last seal is sealed every SnapshotEvery; an
// untouched one is not.
func TestPeriodicSeal(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	calls := snapshotsOK(env, nil)
	in := input()
	in.Policy.SnapshotEvery = 10 * time.Minute
	update(env, 0, UpdateCreate, CreateInput{})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalTouch, struct{}{}) }, 5*time.Minute)
	var during Status
	env.RegisterDelayedCallback(func() { during = query(t, env) }, 15*time.Minute)
	deleteAt(env, 45*time.Minute)
	env.ExecuteWorkflow(BoxWorkflow, in)
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, []string{"begin", "upload sb-1", "complete", "prune"}, *calls, "one seal: nothing happened after it")
	require.Equal(t, cocoonbox.BoxStateRunning, during.State)
	require.NotEmpty(t, during.LastSnapshot)
	require.Empty(t, during.Seal, "a running box is not sealed")
}

// TestLostBoxWithoutSnapshotFails: a box whose sandbox is gone with no snapshot is not brought
// back empty; it fails as lost until its owner recreates it.
func TestLostBoxWithoutSnapshotFails(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(snap.RestoreSnapshot, mock.Anything, mock.Anything).Return(activities.RestoreSnapshotResult{},
		temporal.NewNonRetryableApplicationError("no snapshot", activities.ErrTypeNotFound, nil)).Once()
	claimOK(env, 1, "sb-1")
	claimOK(env, 2, "sb-2")
	hibernates(env, nil, nil)
	env.OnActivity(sb.Hibernate, mock.Anything, mock.Anything).Return(nil).Maybe()
	env.OnActivity(sb.Wake, mock.Anything, mock.Anything).
		Return(temporal.NewNonRetryableApplicationError("gone", activities.ErrTypeSandboxGone, nil)).Once()
	update(env, 0, UpdateCreate, CreateInput{})
	early := update(env, 500*time.Millisecond, UpdateRecreate, RecreateInput{})
	update(env, time.Second, UpdateHibernate, HibernateInput{})
	wake := update(env, 2*time.Second, UpdateWake, WakeInput{})
	recreated := update(env, 3*time.Second, UpdateRecreate, RecreateInput{})
	deleteAt(env, time.Minute)

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	requireTransitionError(t, early.rejected)
	require.Error(t, wake.err)
	require.Contains(t, wake.err.Error(), "lost")
	require.Equal(t, cocoonbox.BoxStateFailed, wake.status.State)
	require.Empty(t, wake.status.SandboxID)
	require.Contains(t, wake.status.LastError, "lost")
	require.NoError(t, recreated.err)
	require.Equal(t, cocoonbox.BoxStateRunning, recreated.status.State)
	require.Equal(t, "sb-2", recreated.status.SandboxID)
	require.Empty(t, recreated.status.LastError)
	env.AssertExpectations(t)
}

func TestDeletePurgesSnapshotsBeforeRelease(t *testing.T) {
	env := newEnv(t)
	claimOK(env, 1, "sb-1")
	calls := snapshotsOK(env, nil)
	env.OnActivity(sb.Release, mock.Anything, mock.Anything).Return(func(context.Context, activities.SandboxInput) error {
		*calls = append(*calls, "release")
		return nil
	})
	update(env, 0, UpdateCreate, CreateInput{})
	del := update(env, time.Second, UpdateDelete, DeleteInput{PurgeSnapshots: true})

	env.ExecuteWorkflow(BoxWorkflow, input())
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, del.err)
	require.Equal(t, []string{"purge", "release"}, *calls)
}
