package agentvm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox/agentvm/wire"
)

// A box has no network interface, so the agent cannot reach the model gateway itself. During a
// step the control plane opens model links through the engine's ports relay to wire.LinkPort: each
// starts with one line,
//
//	COCOONBOX-LINK/1 <credential> <run_id> <step>\n
//
// answered "OK\n" (the link is queued for that step) or "ERR <reason>\n" (closed). The step's
// model client then sends one plain HTTP/1.1 request on each link it takes, without a key: the
// control plane checks it against the provider's one endpoint, adds the user's key and speaks
// TLS to the gateway itself, and streams the answer back before closing the link. The key never
// enters the box.

const (
	// maxLinkLine bounds a link's first line.
	maxLinkLine = 512
	// linkHandshakeTimeout bounds the reading of the first line.
	linkHandshakeTimeout = 10 * time.Second
	// DefaultLinkWait is how long a model call waits for a link when Links.Wait is zero.
	DefaultLinkWait = 15 * time.Second
	// DefaultLinkOrphan is how long a link for a step that is not running is kept when
	// Links.Orphan is zero: the link may arrive before its step starts.
	DefaultLinkOrphan = 30 * time.Second
)

// Links holds the model links the control plane opened, by step, until that step's model calls
// take them. The zero value is not usable; use NewLinks.
type Links struct {
	// Wait bounds how long a model call waits for a link; zero means DefaultLinkWait.
	Wait time.Duration
	// Orphan is how long a link is kept while its step is not running; zero means
	// DefaultLinkOrphan.
	Orphan time.Duration

	mu      sync.Mutex
	idle    map[linkKey][]net.Conn
	arrived map[linkKey]*arrival // while a model call of the step waits for a link
	running map[linkKey]int      // steps in progress (a count: a retry may overlap)
}

type linkKey struct {
	run  string
	step int32
}

// arrival wakes the model calls waiting for a step's link. It is dropped when the last of them
// stops waiting, when a link arrives, or when the step ends, so an agent that lives as long as
// its box keeps nothing per past step.
type arrival struct {
	ch      chan struct{} // closed when a link for the step arrives
	waiters int
}

// NewLinks returns an empty set of links.
func NewLinks() *Links {
	return &Links{idle: map[linkKey][]net.Conn{}, arrived: map[linkKey]*arrival{}, running: map[linkKey]int{}}
}

// put queues a link for a step. A link nobody takes is closed when its step ends or, if the step
// is not running, after Orphan.
func (l *Links) put(runID string, step int32, c net.Conn) {
	k := linkKey{runID, step}
	l.mu.Lock()
	l.idle[k] = append(l.idle[k], c)
	if a, ok := l.arrived[k]; ok {
		close(a.ch)
		delete(l.arrived, k)
	}
	l.mu.Unlock()
	time.AfterFunc(orDefault(l.Orphan, DefaultLinkOrphan), func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.running[k] > 0 {
			return // the step's end closes it
		}
		if l.remove(k, c) {
			_ = c.Close()
		}
	})
}

// drop takes c out of its step's queue, if it is still there, and closes it.
func (l *Links) drop(runID string, step int32, c net.Conn) {
	l.mu.Lock()
	l.remove(linkKey{runID, step}, c)
	l.mu.Unlock()
	_ = c.Close()
}

// remove takes c out of k's queue, reporting whether it was there. l.mu is held.
func (l *Links) remove(k linkKey, c net.Conn) bool {
	q := l.idle[k]
	for i, qc := range q {
		if qc == c {
			l.idle[k] = append(q[:i:i], q[i+1:]...)
			if len(l.idle[k]) == 0 {
				delete(l.idle, k)
			}
			return true
		}
	}
	return false
}

// begin marks a step running; the returned func ends it and closes its links nobody took.
func (l *Links) begin(runID string, step int32) (end func()) {
	k := linkKey{runID, step}
	l.mu.Lock()
	l.running[k]++
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.running[k]--; l.running[k] > 0 {
			return
		}
		delete(l.running, k)
		for _, c := range l.idle[k] {
			_ = c.Close()
		}
		delete(l.idle, k)
		// A call still waiting removes its arrival entry itself when it gives up.
	}
}

// take returns a queued link for the step, waiting up to Wait for one to arrive.
func (l *Links) take(ctx context.Context, runID string, step int32) (net.Conn, error) {
	k := linkKey{runID, step}
	timer := time.NewTimer(orDefault(l.Wait, DefaultLinkWait))
	defer timer.Stop()
	for {
		l.mu.Lock()
		if q := l.idle[k]; len(q) > 0 {
			c := q[0]
			l.remove(k, c)
			l.mu.Unlock()
			return c, nil
		}
		a, ok := l.arrived[k]
		if !ok {
			a = &arrival{ch: make(chan struct{})}
			l.arrived[k] = a
		}
		a.waiters++
		l.mu.Unlock()
		var err error
		select {
		case <-a.ch:
		case <-ctx.Done():
			err = ctx.Err()
		case <-timer.C:
			err = fmt.Errorf("no model link from the control plane for run %s step %d", runID, step)
		}
		l.mu.Lock()
		if a.waiters--; a.waiters == 0 && l.arrived[k] == a {
			delete(l.arrived, k)
		}
		l.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// closeAll closes every queued link.
func (l *Links) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, q := range l.idle {
		for _, c := range q {
			_ = c.Close()
		}
		delete(l.idle, k)
	}
}

// client returns the HTTP client of one step's model calls: every connection it makes is a
// link for that step, whatever address it asks for, carrying one plain HTTP/1.1 request (the
// control plane closes a link after its answer). Close idle connections when the step ends.
func (l *Links) client(runID string, step int32) (*http.Client, *http.Transport) {
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return l.take(ctx, runID, step)
		},
		DisableKeepAlives: true,
	}
	return &http.Client{Transport: tr}, tr
}

// errLinkLine is a first line that is not a link's.
var errLinkLine = errors.New("bad preamble")

// parseLinkLine splits a link's first line (without its newline) into its fields.
func parseLinkLine(line string) (cred, runID string, step int32, err error) {
	f := strings.Split(line, " ")
	if len(f) != 4 || f[0] != wire.LinkProtocol || f[1] == "" {
		return "", "", 0, errLinkLine
	}
	n, err := strconv.ParseInt(f[3], 10, 32)
	if err != nil {
		return "", "", 0, errLinkLine
	}
	if err := checkKey(f[2], int32(n)); err != nil {
		return "", "", 0, err
	}
	return f[1], f[2], int32(n), nil
}

// readLinkLine reads the first line one byte at a time, so nothing after it is consumed.
func readLinkLine(c net.Conn) (string, error) {
	var line []byte
	b := make([]byte, 1)
	for len(line) < maxLinkLine {
		if _, err := c.Read(b); err != nil {
			return "", err
		}
		if b[0] == '\n' {
			return string(line), nil
		}
		line = append(line, b[0])
	}
	return "", errors.New("line too long")
}

// ServeLinks accepts model links on lis for the loop's steps until lis is closed or Stop. It
// checks each link's credential as the gRPC calls are checked.
func (s *Server) ServeLinks(lis net.Listener) error {
	links := s.cfg.Loop.Links
	if links == nil {
		return errors.New("serve links: the loop has no links")
	}
	s.mu.Lock()
	s.linkListeners = append(s.linkListeners, lis)
	s.mu.Unlock()
	for {
		c, err := lis.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("accept link: %w", err)
		}
		go s.handshake(links, c)
	}
}

// handshake reads a link's first line and queues the link, or refuses it.
func (s *Server) handshake(links *Links, c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(linkHandshakeTimeout))
	refuse := func(reason string) {
		s.cfg.Logger.Warn("model link refused", "reason", reason)
		_, _ = c.Write([]byte("ERR " + reason + "\n"))
		_ = c.Close()
	}
	line, err := readLinkLine(c)
	if err != nil {
		refuse("read preamble: " + err.Error())
		return
	}
	if cred, ok := strings.CutPrefix(line, wire.FileProtocol+" "); ok {
		if err := s.check(cred); err != nil {
			refuse(err.Error())
			return
		}
		s.serveFileLink(c)
		return
	}
	cred, runID, step, err := parseLinkLine(line)
	if err != nil {
		refuse(err.Error())
		return
	}
	if err := s.check(cred); err != nil {
		refuse(err.Error())
		return
	}
	// Queued before the answer: a step the worker starts once it has read OK finds the link,
	// and its end closes it if unused (a link queued after the end would wait for Orphan).
	_ = c.SetDeadline(time.Time{})
	links.put(runID, step, c)
	if _, err := c.Write([]byte("OK\n")); err != nil {
		links.drop(runID, step, c)
	}
}

// orDefault is v, or def when v is not above zero (an unset option).
func orDefault[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
