package devstack

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// restartable is a child process the dev stack runs (PostgreSQL, the S3 server) and starts again
// when it dies, in place, so every client keeps the address it has.
type restartable interface {
	Done() <-chan struct{} // closed when the process started last has exited
	ExitError() error      // how it ended, once Done is closed
	Restart(ctx context.Context) error
}

// Supervision limits: a child is started again at once, then with a doubling pause up to
// maxBackoff; one that dies more than maxDeaths times within deathWindow, or cannot be started
// maxRestarts times in a row, is given up, and the stack stops saying why. The window catches
// a crash loop (a child dying as soon as it is up: six deaths in a few seconds, backoff
// included) and not a part killed now and then from outside (the OOM killer, an operator, the
// chaos suite), which is restarted however often that happens.
const (
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 5 * time.Second
	maxRestarts  = 5
	maxDeaths    = 5
	deathWindow  = 30 * time.Second
	restartLimit = time.Minute // one attempt to start it again
)

// ChildState is one supervised child as /healthz reports it.
type ChildState struct {
	State    string    // "running", "restarting" or "failed"
	Restarts int       // times started again since the stack started
	Attempt  int       // the current run of failed or pending restarts (0 when running)
	LastExit string    // how the last process ended, "" before the first death
	Since    time.Time // when State last changed
}

// supervisor watches one child and starts it again when it dies.
type supervisor struct {
	name  string
	child restartable
	log   *slog.Logger
	now   func() time.Time
	// giveUp is called once, from the supervisor's goroutine, when it stops trying.
	giveUp func(error)

	mu     sync.Mutex
	st     ChildState
	deaths []time.Time

	stop chan struct{}
	done chan struct{}
}

func newSupervisor(name string, child restartable, log *slog.Logger, giveUp func(error)) *supervisor {
	s := &supervisor{
		name: name, child: child, log: log.With("component", "supervisor", "child", name),
		now: time.Now, giveUp: giveUp, stop: make(chan struct{}), done: make(chan struct{}),
	}
	s.st = ChildState{State: "running", Since: s.now()}
	go s.run()
	return s
}

// State returns the child's state now.
func (s *supervisor) State() ChildState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// Check is the child's /healthz component: nil while it runs, else its state in one line.
func (s *supervisor) Check() error {
	st := s.State()
	switch st.State {
	case "running":
		return nil
	case "restarting":
		return fmt.Errorf("restarting (attempt %d; last exit: %s)", st.Attempt, st.LastExit)
	}
	return fmt.Errorf("failed after %d restarts (last exit: %s)", st.Restarts, st.LastExit)
}

// Close stops watching, before the stack stops the child itself, and waits for a restart under
// way to end.
func (s *supervisor) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func (s *supervisor) run() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		case <-s.child.Done():
		}
		if err := s.revive(); err != nil {
			s.set(func(st *ChildState) { st.State = "failed" })
			s.log.Error("child given up", "error", err)
			s.giveUp(err)
			return
		}
	}
}

// revive starts the child again after it died; it fails when the child keeps dying or cannot
// be started.
func (s *supervisor) revive() error {
	exit := fmt.Sprint(s.child.ExitError())
	now := s.now()
	s.mu.Lock()
	s.deaths = append(s.deaths, now)
	for len(s.deaths) > 0 && now.Sub(s.deaths[0]) > deathWindow {
		s.deaths = s.deaths[1:]
	}
	deaths := len(s.deaths)
	s.mu.Unlock()
	s.set(func(st *ChildState) { st.State, st.LastExit, st.Attempt = "restarting", exit, 0 })
	if deaths > maxDeaths {
		return fmt.Errorf("%s died %d times within %s (last exit: %s)", s.name, deaths, deathWindow, exit)
	}
	s.log.Warn("child exited; starting it again", "exit", exit)
	backoff := firstBackoff
	var err error
	for attempt := 1; attempt <= maxRestarts; attempt++ {
		s.set(func(st *ChildState) { st.Attempt = attempt })
		select {
		case <-s.stop:
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
		ctx, cancel := context.WithTimeout(context.Background(), restartLimit)
		err = s.child.Restart(ctx)
		cancel()
		if err == nil {
			s.set(func(st *ChildState) { st.State, st.Attempt = "running", 0; st.Restarts++ })
			s.log.Info("child started again", "attempt", attempt)
			return nil
		}
		s.log.Warn("start child again", "attempt", attempt, "error", err)
	}
	return fmt.Errorf("%s could not be started again in %d attempts: %w", s.name, maxRestarts, err)
}

func (s *supervisor) set(f func(*ChildState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.st.State
	f(&s.st)
	if s.st.State != before {
		s.st.Since = s.now()
	}
}
