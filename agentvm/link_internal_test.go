package agentvm

import (
	"context"
	"testing"
	"time"
)

// arrivals is how many steps have an entry in l.arrived.
func (l *Links) arrivals() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.arrived)
}

func TestLinkWaitsLeaveNothingBehind(t *testing.T) {
	l := NewLinks()
	l.Wait = 50 * time.Millisecond
	end := l.begin("run-1", 1)

	// A wait that times out, and one whose call is cancelled.
	if _, err := l.take(t.Context(), "run-1", 1); err == nil {
		t.Fatal("take without a link succeeded")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := l.take(ctx, "run-1", 1); err == nil {
		t.Fatal("take with a cancelled context succeeded")
	}
	if n := l.arrivals(); n != 0 {
		t.Errorf("%d arrival entries after the waits ended", n)
	}

	// A wait still running when the step ends.
	l.Wait = 10 * time.Second
	ctx, cancel = context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := l.take(ctx, "run-1", 1)
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for l.arrivals() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the wait never registered")
		}
		time.Sleep(time.Millisecond)
	}
	end()
	cancel()
	if err := <-done; err == nil {
		t.Fatal("take after the step ended succeeded")
	}
	if n := l.arrivals(); n != 0 {
		t.Errorf("%d arrival entries after the last wait ended", n)
	}
}
