package boxsvc

import (
	"context"
	"fmt"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
)

// RunEvent is one thing WatchRun reports: a recorded step, the run (without its steps) as it
// is now, or a piece of the model's text in a step not yet recorded. Exactly one is set.
type RunEvent struct {
	Step *store.AgentStep
	Run  *Run
	Text *store.RunText
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
	recorded := 0 // the newest step recorded: text of it and before is in its step event
	// The model's text streams while a step runs: subscribed before the first read, so a piece
	// published after that read is not missed.
	texts, unfollow := s.followText(runID)
	defer unfollow()
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
			recorded = max(recorded, steps[i].Step)
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
		if err := s.relayText(ctx, texts, t.C, recorded, send); err != nil {
			return err
		}
	}
}

// relayText sends the run's streamed text of steps after recorded until tick or ctx ends.
func (s *Service) relayText(ctx context.Context, texts <-chan store.RunText, tick <-chan time.Time, recorded int, send func(RunEvent) error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			return nil
		case piece := <-texts:
			if piece.Step <= recorded {
				continue // the step's event carried it whole
			}
			if err := send(RunEvent{Text: &piece}); err != nil {
				return err
			}
		}
	}
}

// runChanged says whether a follower should hear about the run again.
func runChanged(a, b store.AgentRun) bool {
	return a.State != b.State || a.Error != b.Error || !a.EndedAt.Equal(b.EndedAt)
}

func ref[T any](v T) *T { return &v }
