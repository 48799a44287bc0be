package engine

import (
	"context"
	"sync"
	"time"
)

// box is the engine's live view of one sandbox.
//
// Locking, outermost first:
//   - gate: taken briefly by anyone about to take op, so a lifecycle operation that has
//     cancelled the data-plane holds cannot be overtaken by a new hold before it gets op.
//   - op: serializes operations on this sandbox. Lifecycle operations that change what runs
//     (hibernate, wake, release) hold it exclusively; data-plane use (exec, relay, checkpoint)
//     holds it shared for its whole duration, so a box never hibernates under a running command.
//     It is held across runtime calls; nothing engine-wide is.
//   - saveMu: orders writes of this box's record file.
//   - mu: guards the fields below; never held across a runtime call or I/O.
type box struct {
	gate   sync.Mutex
	op     sync.RWMutex
	saveMu sync.Mutex
	mu     sync.Mutex

	rec record
	// gone: released, expired-and-reaped or lost; every later operation answers 404.
	gone bool
	// dropped: the record file is removed; save writes nothing more.
	dropped bool
	// stopped: the runtime reported the box's processes gone but its disk kept (after a host
	// or runtime crash); a wake starts it again instead of restoring memory.
	stopped bool
	// holds are the data-plane users now in the box, each with a cancel that ends it (closes a
	// relay, kills a command) so hibernate and release never wait on a client.
	holds    map[uint64]func()
	nextHold uint64
	// lastActive is the last data-plane activity, for idle hibernation.
	lastActive time.Time
	// frozen is open while a checkpoint has the running box paused for its copy: a command
	// started then would fail, so execs wait for it to close. freezes counts the pauses, so an
	// exec can tell one happened while it started.
	frozen  chan struct{}
	freezes uint64
}

// freeze marks the box paused for a checkpoint's copy until the returned func thaws it.
func (b *box) freeze() (thaw func()) {
	b.mu.Lock()
	ch := make(chan struct{})
	b.frozen = ch
	b.freezes++
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		if b.frozen == ch {
			b.frozen = nil
		}
		b.mu.Unlock()
		close(ch)
	}
}

// thawed waits until no checkpoint has the box paused, and answers the count of pauses so far.
func (b *box) thawed(ctx context.Context) (uint64, error) {
	b.mu.Lock()
	ch, n := b.frozen, b.freezes
	b.mu.Unlock()
	if ch == nil {
		return n, nil
	}
	select {
	case <-ch:
		return b.thawed(ctx)
	case <-ctx.Done():
		return n, context.Cause(ctx)
	}
}

func newBox(r record, now time.Time) *box {
	return &box{rec: r, holds: map[uint64]func(){}, lastActive: now}
}

// snapshot returns a copy of the record and the flags callers branch on.
func (b *box) snapshot() (r record, gone bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rec, b.gone
}

// lockLifecycle takes op exclusively for an operation that stops or changes what runs in the
// box: it first cancels every data-plane hold (closing relays before a hibernate, as runsc
// cannot checkpoint a box holding host sockets), then waits for them to let go.
func (b *box) lockLifecycle() (unlock func()) {
	b.gate.Lock()
	b.cancelHolds()
	b.op.Lock()
	b.gate.Unlock()
	return b.op.Unlock
}

// cancelHolds ends every data-plane use without waiting, for Close.
func (b *box) cancelHolds() {
	b.mu.Lock()
	cancels := make([]func(), 0, len(b.holds))
	for _, c := range b.holds {
		cancels = append(cancels, c)
	}
	b.mu.Unlock()
	for _, c := range cancels {
		c()
	}
}

// use wakes b if it is hibernated and registers a data-plane hold that keeps it awake and
// unhibernated until done is called. cancel ends the use when a lifecycle operation needs the
// box. The wake is the transparent one the contract promises for exec, relays and checkpoints.
func (e *Engine) use(ctx context.Context, b *box, trigger string, cancel func()) (done func(), err error) {
	for {
		b.gate.Lock()
		b.op.RLock()
		b.gate.Unlock()
		b.mu.Lock()
		if b.gone {
			b.mu.Unlock()
			b.op.RUnlock()
			return nil, errUnknownSandbox
		}
		if !b.rec.Hibernated {
			id := b.nextHold
			b.nextHold++
			b.holds[id] = cancel
			b.lastActive = e.now()
			b.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					b.mu.Lock()
					delete(b.holds, id)
					b.lastActive = e.now()
					b.mu.Unlock()
					b.op.RUnlock()
				})
			}, nil
		}
		b.mu.Unlock()
		b.op.RUnlock()
		if err := e.wake(ctx, b, trigger); err != nil {
			return nil, err
		}
	}
}
