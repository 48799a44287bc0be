package boxsvc

import (
	"context"
	"fmt"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
)

// RunEvent is one thing WatchRun reports: a recorded step, or the run (without its steps) as it
// is now. Exactly one is set.
type RunEvent struct {
	Step *store.AgentStep
	Run  *Run
}

// defaultRunWatchEvery is how often WatchRun reads the run when WatchEvery is not set: a step
// takes seconds, so a quarter second keeps a follower close without loading the store.
const defaultRunWatchEvery = 250 * time.Millisecond

// WatchRun calls send with each step already recorded, then with the run as it is, then with
// every new step and state change, until the run ends (the last event is its final state), ctx
// ends, or send fails (viewer). It polls the store, where the run's workflow records each step
// and state; the caller's role is checked again at every poll, so a revoked share ends the
// watch with the error the caller would now get. It counts as one of the user's streams
// (Quota.Streams).
func (s *Service) WatchRun(ctx context.Context, caller, runID string, send func(RunEvent) error) error {
	release, err := s.streams.take(caller, s.Quota.Streams, limitStreams)
	if err != nil {
		return err
	}
	defer release()
	every := s.WatchEvery
	if every <= 0 {
		every = defaultRunWatchEvery
	}
	var last *store.AgentRun
	// What was sent of each step: a retried step's row is replaced, and a follower hears the
	// step again if it reads differently.
	sent := map[int]string{}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		// The run before its steps: a run read as ended has all its steps recorded, since the
		// workflow records a step before it moves on.
		run, err := s.run(ctx, caller, runID, cocoonbox.RoleViewer)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		steps, err := s.Store.AgentSteps(ctx, runID)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read run steps: %w", err)
		}
		for i := range steps {
			seen := steps[i].Summary + "\x00" + string(steps[i].Payload)
			if prev, ok := sent[steps[i].Step]; ok && prev == seen {
				continue
			}
			if err := send(RunEvent{Step: &steps[i]}); err != nil {
				return err
			}
			sent[steps[i].Step] = seen
		}
		if last == nil || runChanged(*last, run) {
			if err := send(RunEvent{Run: ref(s.withSteps(ctx, run, steps))}); err != nil {
				return err
			}
		}
		last = &run
		if !run.EndedAt.IsZero() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// runChanged says whether a follower should hear about the run again.
func runChanged(a, b store.AgentRun) bool {
	return a.State != b.State || a.Error != b.Error || !a.EndedAt.Equal(b.EndedAt)
}

func ref[T any](v T) *T { return &v }
