package activities

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/log"

	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

const (
	// idleLinks is how many unused links wait in the box during a step: one, for its model
	// call. Each link is a ports-relay dial, a runsc exec that costs tens of milliseconds of
	// CPU, which a spare would spend on every step while the box runs its tools.
	idleLinks = 1
	// relinkAfter is how long the keeper waits after the agent took a link before it opens the
	// next: a step's one model call needs no second link, while a retry (which backs off longer
	// than this anyway) or a second connection waits for this and one dial.
	relinkAfter = 250 * time.Millisecond
	// linkHandshakeTimeout bounds the agent's answer to a link's first line.
	linkHandshakeTimeout = 10 * time.Second
	// linkBackoff and maxLinkBackoff pace the reopening of links that failed.
	linkBackoff    = 100 * time.Millisecond
	maxLinkBackoff = 5 * time.Second
	// maxGatewayPipes bounds a step's links that are idle or carrying a request to the gateway.
	// The box's root can make every link busy at once; without a bound the worker would open
	// links, goroutines and gateway connections for it until the step ends. An honest model
	// client uses one or two at a time, so the idle links stay ready.
	maxGatewayPipes = 8
	// gatewayDialTimeout bounds the default gateway dial.
	gatewayDialTimeout = 10 * time.Second
)

// modelLinks keeps idle model links open to a box's agent for one step, and answers the request
// on each link the agent starts using (serve).
type modelLinks struct {
	a        *Agent
	ref      sandbox.SandboxRef
	preamble string // holds the credential: never logged
	route    route  // holds the key: never logged
	meter    *meter
	client   *http.Client
	log      log.Logger
	// pre holds the links opened for this step as the one before it ended (prelinks), each
	// keeper's first; nil when there are none.
	pre chan sandbox.Conn
	// answered, when set, is called once a model call's answer has reached the box.
	answered func()

	// slots holds one token per idle link or pipe, so at most maxGatewayPipes of them are
	// live; a token is taken before dialing a link and given back when the link or its pipe
	// ends.
	slots   chan struct{}
	warned  atomic.Bool // the bound was logged
	wg      sync.WaitGroup
	mu      sync.Mutex
	stopped bool
	open    map[net.Conn]struct{}
}

// keepLinks opens model links for the step until the returned stop, which closes them all and
// waits for their goroutines. Its failures are logged, never the step's: without links the
// agent's model call fails and says so.
func (a *Agent) keepLinks(ctx context.Context, box boxlink.Box, runID string, step int, rt route, mt *meter) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	client, tr := newGatewayClient(a.dialGateway)
	m := &modelLinks{
		a: a, ref: box.Ref, route: rt, meter: mt, client: client, log: logger(ctx), open: map[net.Conn]struct{}{},
		slots:    make(chan struct{}, maxGatewayPipes),
		preamble: linkPreamble(box, runID, step),
		pre:      a.prelinks.take(box.Ref.ID, runID, step),
		// The next step's link is dialed as soon as the model has answered: the dial (a runsc
		// exec, 40 to 50 ms) then runs beside the step's tools and the workflow's turn, where
		// opened as the step ended its model call waited for it. A step that was the last
		// leaves one link unused, closed after prelinkTTL.
		answered: func() { a.prelinks.open(a.Link.Sandbox, box, runID, step+1) },
	}
	for range idleLinks {
		m.wg.Go(func() { m.keep(ctx) })
	}
	return func() {
		cancel()
		m.mu.Lock()
		m.stopped = true
		for c := range m.open {
			_ = c.Close()
		}
		m.mu.Unlock()
		m.wg.Wait()
		tr.CloseIdleConnections()
	}
}

// track registers c to be closed at stop; false (c closed) when stop came first.
func (m *modelLinks) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		_ = c.Close()
		return false
	}
	m.open[c] = struct{}{}
	return true
}

// close closes c and forgets it.
func (m *modelLinks) close(c net.Conn) {
	m.mu.Lock()
	delete(m.open, c)
	m.mu.Unlock()
	_ = c.Close()
}

// keep holds one idle link open: when the agent starts using it, its request is served and
// another link takes its place.
func (m *modelLinks) keep(ctx context.Context) {
	pre := m.pre
	backoff := linkBackoff
	for ctx.Err() == nil {
		if !m.acquire(ctx) {
			if pre != nil {
				go closeOne(pre)
			}
			return
		}
		link, br, err := m.idle(ctx, pre)
		if pre != nil {
			pre = nil
			if errors.Is(err, errLinkUnused) {
				err = nil // opened ahead, it may have outlived the box's wait for it: dial at once
				m.release()
				continue
			}
		}
		if err != nil {
			m.release()
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, errLinkUnused) {
				// Usually the step ended in the box before its answer reached us.
				m.log.Debug("model link", "sandbox", m.ref.ID, "error", err.Error(), "retry_in", backoff)
			} else {
				m.log.Warn("model link", "sandbox", m.ref.ID, "error", err.Error(), "retry_in", backoff)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxLinkBackoff)
			continue
		}
		backoff = linkBackoff
		m.wg.Go(func() {
			defer m.release()
			m.serve(ctx, link, br)
		})
		select {
		case <-ctx.Done():
			return
		case <-time.After(relinkAfter):
		}
	}
}

// acquire takes a slot for a new link, waiting for a pipe to end when all are taken; false
// when ctx ends first.
func (m *modelLinks) acquire(ctx context.Context) bool {
	select {
	case m.slots <- struct{}{}:
		return true
	default:
	}
	if m.warned.CompareAndSwap(false, true) {
		m.log.Warn("model links at their bound: no new link until a pipe ends",
			"sandbox", m.ref.ID, "max", maxGatewayPipes)
	}
	select {
	case m.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// release gives back a slot taken by acquire.
func (m *modelLinks) release() { <-m.slots }

// errLinkUnused is an idle link the agent closed: its step ended, or it waited too long.
var errLinkUnused = errors.New("agent closed an unused link")

// idle opens a link, or takes the next one opened ahead on pre when that is not nil, and waits
// until the agent sends its first byte.
func (m *modelLinks) idle(ctx context.Context, pre chan sandbox.Conn) (sandbox.Conn, *bufio.Reader, error) {
	var link sandbox.Conn
	if pre != nil {
		select {
		case link = <-pre:
		case <-ctx.Done():
			go closeOne(pre)
			return nil, nil, ctx.Err()
		}
	}
	if link != nil {
		if !m.track(link) {
			return nil, nil, ctx.Err()
		}
	} else {
		var err error
		if link, err = m.a.Link.Sandbox.DialPort(ctx, m.ref, wire.LinkPort); err != nil {
			return nil, nil, fmt.Errorf("dial agent link: %w", err)
		}
		if !m.track(link) {
			return nil, nil, ctx.Err()
		}
		if err := handshake(link, m.preamble); err != nil {
			m.close(link)
			return nil, nil, err
		}
	}
	br := bufio.NewReaderSize(link, 4<<10)
	if _, err := br.Peek(1); err != nil {
		m.close(link)
		if errors.Is(err, io.EOF) {
			err = errLinkUnused
		}
		return nil, nil, fmt.Errorf("wait for agent: %w", err)
	}
	return link, br, nil
}

// linkPreamble is the first line of a model link for step of run in box. It holds the box's
// credential: never log it.
func linkPreamble(box boxlink.Box, run string, step int) string {
	return fmt.Sprintf("%s %s %s %d\n", wire.LinkProtocol, box.Cred, run, step)
}

// handshake sends a link's first line, preamble, and reads the agent's answer.
func handshake(link net.Conn, preamble string) error {
	_ = link.SetDeadline(time.Now().Add(linkHandshakeTimeout))
	if _, err := io.WriteString(link, preamble); err != nil {
		return fmt.Errorf("send link preamble: %w", err)
	}
	// One byte at a time: nothing after the answer may be consumed here.
	var answer []byte
	b := make([]byte, 1)
	for {
		if _, err := link.Read(b); err != nil {
			return fmt.Errorf("read link answer: %w", err)
		}
		if b[0] == '\n' {
			break
		}
		if answer = append(answer, b[0]); len(answer) > 256 {
			return errors.New("read link answer: too long")
		}
	}
	_ = link.SetDeadline(time.Time{})
	if reason, ok := strings.CutPrefix(string(answer), "ERR "); ok {
		return fmt.Errorf("agent refused link: %s", reason)
	}
	if string(answer) != "OK" {
		return fmt.Errorf("agent answered link with %q", answer)
	}
	return nil
}

// dialGateway is DialGateway or a net.Dialer with a timeout.
func (a *Agent) dialGateway(ctx context.Context, network, addr string) (net.Conn, error) {
	if a.DialGateway != nil {
		return a.DialGateway(ctx, network, addr)
	}
	d := net.Dialer{Timeout: gatewayDialTimeout}
	return d.DialContext(ctx, network, addr)
}
