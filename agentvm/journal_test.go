package agentvm_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

func TestJournalRunsAStepOnce(t *testing.T) {
	for _, provider := range providers {
		t.Run(provider, func(t *testing.T) {
			dir := t.TempDir()
			// One scripted turn: a second model call would fail the test.
			srv := modeltest.NewServer(t, testKey,
				modeltest.Calls(modeltest.Call("shell", `{"command":"echo run >> runs.txt"}`)))
			var n atomic.Int32
			loop := newLoop(dir, &n)
			j, err := agentvm.OpenJournal(filepath.Join(dir, "journal"))
			require.NoError(t, err)
			req := stepRequest(srv, provider, 1, nil)
			step := func(ctx context.Context) (*agentvmv1.StepResponse, error) { return loop.Step(ctx, req) }

			first, err := j.Do(t.Context(), "run-1", 1, step)
			require.NoError(t, err)
			require.False(t, first.Replayed)

			again, err := j.Do(t.Context(), "run-1", 1, step)
			require.NoError(t, err)
			require.True(t, again.Replayed)
			again.Replayed = false
			require.True(t, proto.Equal(first, again))

			// A reopened journal (the agent restarted) still knows the step.
			j2, err := agentvm.OpenJournal(filepath.Join(dir, "journal"))
			require.NoError(t, err)
			third, err := j2.Do(t.Context(), "run-1", 1, step)
			require.NoError(t, err)
			require.True(t, third.Replayed)

			require.EqualValues(t, 1, n.Load())
			runs, err := os.ReadFile(filepath.Join(dir, "runs.txt"))
			require.NoError(t, err)
			require.Equal(t, "run\n", string(runs))
			require.Len(t, srv.Requests(), 1)
		})
	}
}

func TestJournalRunsConcurrentRetriesOnce(t *testing.T) {
	j, err := agentvm.OpenJournal(t.TempDir())
	require.NoError(t, err)
	var runs atomic.Int32
	release := make(chan struct{})
	step := func(context.Context) (*agentvmv1.StepResponse, error) {
		runs.Add(1)
		<-release
		return &agentvmv1.StepResponse{Text: "once"}, nil
	}
	var wg sync.WaitGroup
	replayed := make([]bool, 4)
	for i := range replayed {
		wg.Go(func() {
			resp, err := j.Do(t.Context(), "run/../x", 7, step)
			require.NoError(t, err)
			require.Equal(t, "once", resp.Text)
			replayed[i] = resp.Replayed
		})
	}
	close(release)
	wg.Wait()
	require.EqualValues(t, 1, runs.Load())
	n := 0
	for _, r := range replayed {
		if !r {
			n++
		}
	}
	require.Equal(t, 1, n)
}

func TestJournalRecordsNothingOnFailureAndChecksKeys(t *testing.T) {
	j, err := agentvm.OpenJournal(t.TempDir())
	require.NoError(t, err)
	_, err = j.Do(t.Context(), "r", 1, func(context.Context) (*agentvmv1.StepResponse, error) {
		return nil, context.DeadlineExceeded
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	resp, err := j.Lookup("r", 1)
	require.NoError(t, err)
	require.Nil(t, resp)

	_, err = j.Lookup("", 1)
	require.Error(t, err)
	_, err = j.Lookup("r", 0)
	require.Error(t, err)

	// A recorded step keeps its first record.
	require.NoError(t, j.Record("r", 2, &agentvmv1.StepResponse{Text: "first"}))
	require.NoError(t, j.Record("r", 2, &agentvmv1.StepResponse{Text: "second"}))
	resp, err = j.Lookup("r", 2)
	require.NoError(t, err)
	require.Equal(t, "first", resp.Text)
}

// TestJournalDoesNotRunAnInterruptedStepAgain kills, with SIGKILL, an agent process in the middle
// of a step's tool call. The restarted agent's journal answers the step's retry with
// ErrInterrupted instead of running its tool calls a second time; a step that failed is run again.
func TestJournalDoesNotRunAnInterruptedStepAgain(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "JOURNAL_HELPER_DIR="+dir)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "tool-running")); return err == nil },
		30*time.Second, 10*time.Millisecond, "the helper's step never started")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	j, err := agentvm.OpenJournal(filepath.Join(dir, "journal"))
	require.NoError(t, err)
	ran := false
	_, err = j.Do(t.Context(), "run-1", 2, func(context.Context) (*agentvmv1.StepResponse, error) {
		ran = true
		return &agentvmv1.StepResponse{}, nil
	})
	require.ErrorIs(t, err, agentvm.ErrInterrupted)
	require.Contains(t, err.Error(), "step 2: the box's agent restarted while the step ran")
	require.False(t, ran, "the interrupted step ran again")

	// A step whose run failed (said so, did nothing lasting) is tried again.
	_, err = j.Do(t.Context(), "run-1", 3, func(context.Context) (*agentvmv1.StepResponse, error) {
		return nil, context.DeadlineExceeded
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	resp, err := j.Do(t.Context(), "run-1", 3, func(context.Context) (*agentvmv1.StepResponse, error) {
		return &agentvmv1.StepResponse{Text: "second try"}, nil
	})
	require.NoError(t, err)
	require.Equal(t, "second try", resp.Text)
}

// The agent TestJournalDoesNotRunAnInterruptedStepAgain kills: this test binary, started with
// JOURNAL_HELPER_DIR set, starts step 2 of run-1, whose tool call never ends.
func init() {
	dir := os.Getenv("JOURNAL_HELPER_DIR")
	if dir == "" {
		return
	}
	j, err := agentvm.OpenJournal(filepath.Join(dir, "journal"))
	if err != nil {
		os.Exit(2)
	}
	_, _ = j.Do(context.Background(), "run-1", 2, func(ctx context.Context) (*agentvmv1.StepResponse, error) {
		if err := os.WriteFile(filepath.Join(dir, "tool-running"), nil, 0o600); err != nil {
			return nil, err
		}
		select {} // killed here
	})
	os.Exit(3)
}
