package boxsvc

import (
	"context"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox/internal/store"
)

// textHub hands the model text workers publish (store.RunText) to this server's followers of
// each run. While any run has a follower it listens on one connection of the store (and again
// after a failure); with none it holds no connection.
type textHub struct {
	mu    sync.Mutex
	subs  map[string]map[chan store.RunText]struct{}
	count int
	stop  context.CancelFunc // ends the listener; nil while nobody follows
	done  chan struct{}      // closed when the listener has let go of its connection
}

// followerBuffer is how many pieces of text a follower may be behind before pieces are dropped
// for it: a piece dropped costs the follower only the live view; the step brings the whole text.
const followerBuffer = 256

// followText subscribes to run's streamed text until stop. Without a store, nothing comes.
func (s *Service) followText(run string) (texts <-chan store.RunText, stop func()) {
	ch := make(chan store.RunText, followerBuffer)
	if s.Store == nil {
		return ch, func() {}
	}
	h := &s.texts
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[string]map[chan store.RunText]struct{}{}
	}
	if h.subs[run] == nil {
		h.subs[run] = map[chan store.RunText]struct{}{}
	}
	h.subs[run][ch] = struct{}{}
	if h.count++; h.count == 1 {
		ctx, cancel := context.WithCancel(context.Background())
		h.stop, h.done = cancel, make(chan struct{})
		go s.listenText(ctx, h.done)
	}
	return ch, func() {
		h.mu.Lock()
		delete(h.subs[run], ch)
		if len(h.subs[run]) == 0 {
			delete(h.subs, run)
		}
		var done chan struct{}
		if h.count--; h.count == 0 {
			h.stop()
			done, h.stop = h.done, nil
		}
		h.mu.Unlock()
		if done != nil {
			<-done // the connection is back before the last follower is gone
		}
	}
}

// listenText is the hub's listener until ctx ends.
func (s *Service) listenText(ctx context.Context, done chan struct{}) {
	defer close(done)
	h := &s.texts
	backoff := time.Second
	for {
		err := s.Store.ListenRunText(ctx, func() { backoff = time.Second }, func(t store.RunText) {
			h.mu.Lock()
			defer h.mu.Unlock()
			for ch := range h.subs[t.Run] {
				select {
				case ch <- t:
				default: // the follower is behind: it reads the step whole
				}
			}
		})
		if ctx.Err() != nil {
			return
		}
		if s.Logger != nil {
			s.Logger.Warn("listen for agent runs' streamed text; listening again", "err", err, "in", backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}
