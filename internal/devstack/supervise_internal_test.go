package devstack

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

// killableChild is a restartable whose process a test kills; a restart always works.
type killableChild struct {
	mu       sync.Mutex
	done     chan struct{}
	restarts int
}

func (c *killableChild) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

func (c *killableChild) ExitError() error { return errors.New("signal: killed") }

func (c *killableChild) Restart(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = make(chan struct{})
	c.restarts++
	return nil
}

func (c *killableChild) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.done)
}

func (c *killableChild) restarted() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restarts
}

// TestSupervisorGivesUpOnlyOnACrashLoop: a child killed from outside every 20 s (the chaos
// suite, the OOM killer) is started again every time, however often; one that dies six times
// within 30 s is a crash loop, and the stack is told why it gives up.
func TestSupervisorGivesUpOnlyOnACrashLoop(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	}
	child := &killableChild{done: make(chan struct{})}
	gaveUp := make(chan error, 1)
	s := &supervisor{name: "postgres", child: child, log: slog.New(slog.DiscardHandler), now: clock,
		giveUp: func(err error) { gaveUp <- err }, stop: make(chan struct{}), done: make(chan struct{})}
	s.st = ChildState{State: "running", Since: clock()}
	go s.run()
	t.Cleanup(s.Close)

	killAndWait := func(n int) {
		t.Helper()
		child.kill()
		testutil.Eventually(t, testutil.WaitShort, "the child started again", func() bool {
			return child.restarted() == n && s.State().State == "running"
		})
	}
	for n := 1; n <= 10; n++ {
		killAndWait(n)
		advance(20 * time.Second)
	}
	select {
	case err := <-gaveUp:
		t.Fatalf("gave up on a child killed every 20 s: %v", err)
	default:
	}

	advance(deathWindow)        // the window holds none of those deaths
	for n := 11; n <= 15; n++ { // five deaths a second apart, then a sixth
		killAndWait(n)
		advance(time.Second)
	}
	child.kill()
	select {
	case err := <-gaveUp:
		if !strings.Contains(err.Error(), "postgres died 6 times within 30s") {
			t.Fatalf("gave up saying %q", err)
		}
	case <-time.After(testutil.WaitShort):
		t.Fatal("a child dying six times in 30 s was started again")
	}
	if st := s.State(); st.State != "failed" {
		t.Fatalf("state after giving up: %+v", st)
	}
}
