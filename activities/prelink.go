package activities

import (
	"context"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// prelinkTTL is how long model links opened for a run's next step wait for that step on this
// worker before they are closed. The agent keeps a link for a step that has not started for
// agentvm.DefaultLinkOrphan (30 s), so a link is never closed under a step that took it.
const prelinkTTL = 20 * time.Second

// prelinks holds the model links a worker opens for a run's next step as the step before it
// ends. A link is a dial of the engine's ports relay (about 40 ms, a runsc exec) that the next
// step's model call would otherwise wait for: opened while the workflow schedules that step, it
// is waiting in the box when the call starts. Links nobody takes within prelinkTTL are closed;
// a next step that runs on another worker dials its own, as every step did before.
type prelinks struct {
	mu     sync.Mutex
	byStep map[prelinkKey]chan sandbox.Conn
}

// prelinkKey names one step of a run on one sandbox: a box woken on a new sandbox takes none
// of the old one's links.
type prelinkKey struct {
	sandbox, run string
	step         int
}

// open starts dialing idleLinks links for step of run in box through sb. Each dial sends its
// link, or nil when it failed, on the channel the step takes with take.
func (p *prelinks) open(sb sandbox.Client, box boxlink.Box, run string, step int) {
	k := prelinkKey{box.Ref.ID, run, step}
	ch := make(chan sandbox.Conn, idleLinks)
	p.mu.Lock()
	if p.byStep == nil {
		p.byStep = map[prelinkKey]chan sandbox.Conn{}
	}
	if _, ok := p.byStep[k]; ok {
		p.mu.Unlock()
		return // a retried step ended twice: its links are under way
	}
	p.byStep[k] = ch
	p.mu.Unlock()
	preamble := linkPreamble(box, run, step)
	ctx, cancel := context.WithTimeout(context.Background(), linkHandshakeTimeout)
	var wg sync.WaitGroup
	for range idleLinks {
		wg.Go(func() {
			link, err := sb.DialPort(ctx, box.Ref, wire.LinkPort)
			if err == nil {
				if err = handshake(link, preamble); err != nil {
					_ = link.Close()
				}
			}
			if err != nil {
				link = nil
			}
			ch <- link
		})
	}
	go func() { wg.Wait(); cancel() }()
	time.AfterFunc(prelinkTTL, func() {
		p.mu.Lock()
		mine := p.byStep[k] == ch
		if mine {
			delete(p.byStep, k)
		}
		p.mu.Unlock()
		if mine {
			closeAll(ch)
		}
	})
}

// take returns the channel of the links opened for step, once: a step's keepers each receive
// at most one link from it. nil when none were opened here.
func (p *prelinks) take(sandbox, run string, step int) chan sandbox.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := prelinkKey{sandbox, run, step}
	ch := p.byStep[k]
	delete(p.byStep, k)
	return ch
}

// closeAll receives the idleLinks results on ch, closing each link.
func closeAll(ch chan sandbox.Conn) {
	for range idleLinks {
		closeOne(ch)
	}
}

// closeOne receives one result on ch and closes its link.
func closeOne(ch chan sandbox.Conn) {
	if c := <-ch; c != nil {
		_ = c.Close()
	}
}
