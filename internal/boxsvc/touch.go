package boxsvc

import (
	"context"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/workflows"
)

// touchEvery is how often this process signals a box that it is in use, at most. Each signal is
// a workflow task of the box's workflow, and a status query (which every exec, file call and
// desktop open makes) that arrives during one waits for it: back-to-back execs paid about 5 ms
// each for the touch of the one before. A box's idle period is minutes, so a touch held back
// for this long and then sent moves its idle deadline by no more than this.
const touchEvery = time.Second

// touches holds back the touches of boxes touched within touchEvery, sending one at the end of
// that interval instead: the last use of a box always reaches its workflow.
type touches struct {
	mu    sync.Mutex
	boxes map[cocoonbox.BoxID]*touchState
}

type touchState struct {
	sent    time.Time // when the last touch was sent
	pending bool      // a touch is held back, to be sent at sent+touchEvery
}

// touch tells the box's workflow it is in use, so it is not idle-hibernated; best effort, and
// sent beside the answer rather than before it: the caller need not wait for the signal.
func (s *Service) touch(ctx context.Context, id cocoonbox.BoxID) {
	if s.Temporal == nil {
		return // a service that reaches no workflows (some tests) has no idle clock to restart
	}
	t := &s.touches
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.boxes == nil {
		t.boxes = map[cocoonbox.BoxID]*touchState{}
	}
	st := t.boxes[id]
	now := time.Now()
	switch {
	case st == nil || now.Sub(st.sent) >= touchEvery:
		t.boxes[id] = &touchState{sent: now}
		s.sendTouch(ctx, id)
	case !st.pending:
		st.pending = true
		ctx := context.WithoutCancel(ctx)
		time.AfterFunc(st.sent.Add(touchEvery).Sub(now), func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			st.pending, st.sent = false, time.Now()
			s.sendTouch(ctx, id)
		})
	}
	// Boxes touched long ago are forgotten, so the map holds only those in use.
	for other, o := range t.boxes {
		if !o.pending && now.Sub(o.sent) >= touchEvery {
			delete(t.boxes, other)
		}
	}
}

// sendTouch signals the box's workflow in the background; a failure is logged.
func (s *Service) sendTouch(ctx context.Context, id cocoonbox.BoxID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	go func() {
		defer cancel()
		if err := workflows.Touch(ctx, s.Temporal, id); err != nil && s.Logger != nil {
			s.Logger.Warn("touch box", "box", id, "err", err)
		}
	}()
}
