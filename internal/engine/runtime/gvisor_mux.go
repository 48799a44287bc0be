package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// The relay mux: one `runsc exec` of `cocoonbox-init relay mux` per running box carries the box's
// execs, each a yamux stream to the init (relay says why ports keep a process each). A relay
// process of its own per exec cost a runsc exec each, about 40 ms of CPU. The mux holds the
// engine's host socket in the box, so it is stopped before a checkpoint (Hibernate) and started
// again by the next exec; it also stops after muxIdle without streams, unless the box is kept
// ready (KeepReady), since its runsc process costs host memory. A box whose init has no mux (an
// image older than it) gets a relay process per exec, as before.

// muxIdle is how long a relay mux with no stream is kept (a variable for the tests).
var muxIdle = 30 * time.Second

// muxMode is the relay argument that starts the mux (a variable, so a test can play a box whose
// init has none).
var muxMode = "mux"

// boxMux is a box's running relay mux: the yamux session and the relay process under it.
type boxMux struct {
	sess *yamux.Session
	proc *relayConn // the runsc exec and the engine's end of its socket pair
}

// muxConn is one connection into a box as a stream of its relay mux.
type muxConn struct {
	*yamux.Stream
	box    *gbox
	once   sync.Once
	closed atomic.Bool
}

// CloseWrite passes EOF to the box: a yamux Close is a half-close.
func (c *muxConn) CloseWrite() error { return c.Stream.Close() }

// Close ends the connection: no more writes, and reads return at once, as on a closed socket.
// The box's side ends its target connection when it reads the EOF, or when yamux resets the
// stream after its close timeout.
func (c *muxConn) Close() error {
	c.once.Do(func() {
		c.closed.Store(true)
		_ = c.Stream.Close()
		_ = c.SetReadDeadline(time.Now())
		c.box.untrack(c)
	})
	return nil
}

func (c *muxConn) isClosed() bool { return c.closed.Load() }

// muxRelay opens a stream to target on the box's relay mux, starting the mux first if needed.
// ok is false when the box has no mux (its init is older than it, or it could not start), and
// the caller relays on its own.
func (g *gvisor) muxRelay(ctx context.Context, b *gbox, target []string) (c relayed, ok bool, err error) {
	sess, err := g.session(ctx, b)
	if err != nil {
		return nil, true, err
	}
	if sess == nil {
		return nil, false, nil
	}
	st, err := sess.OpenStream()
	if err != nil {
		b.stopMux(sess) // a mux whose process went; the next connection starts another
		return nil, false, nil
	}
	mc := &muxConn{Stream: st, box: b}
	b.mu.Lock()
	b.relays[mc] = true
	b.mu.Unlock()
	line := strings.Join(target, " ") + "\n"
	_ = st.SetDeadline(time.Now().Add(relaySetupTimeout))
	stop := context.AfterFunc(ctx, func() { _ = st.SetDeadline(time.Now()) })
	var status [1]byte
	_, err = io.WriteString(st, line)
	if err == nil {
		_, err = io.ReadFull(st, status[:])
	}
	stop()
	switch {
	case ctx.Err() != nil:
		_ = mc.Close()
		return nil, true, ctx.Err()
	case err != nil:
		_ = mc.Close()
		return nil, true, fmt.Errorf("relay to %s: %w", target[0], err)
	case status[0] != boxproto.RelayOK:
		msg, _ := io.ReadAll(io.LimitReader(st, 1024))
		_ = mc.Close()
		return nil, true, relayRefused(target, msg)
	}
	_ = st.SetDeadline(time.Time{})
	return mc, true, nil
}

// session returns the box's relay mux session, starting the mux when none runs; nil when the
// box's init has none.
func (g *gvisor) session(ctx context.Context, b *gbox) (*yamux.Session, error) {
	b.muxMu.Lock()
	defer b.muxMu.Unlock()
	if b.mux != nil && !b.mux.sess.IsClosed() {
		return b.mux.sess, nil
	}
	if b.noMux {
		return nil, nil
	}
	if b.mux != nil {
		b.mux.proc.shut(false)
		b.mux = nil
	}
	proc, err := g.spawnRelay(ctx, b, false, muxMode)
	switch {
	case errors.Is(err, ErrNotRunning) || ctx.Err() != nil:
		return nil, err
	case err != nil && strings.Contains(err.Error(), "usage:"):
		// An init without the mux prints its usage and exits before any status byte.
		g.log.Info("box has no relay mux; one relay process per connection", "id", b.spec.ID)
		b.noMux = true
		return nil, nil
	case err != nil:
		g.log.Warn("start relay mux; relaying this connection on its own", "id", b.spec.ID, "err", err)
		return nil, nil
	}
	sess, err := yamux.Client(proc.UnixConn, boxproto.MuxConfig())
	if err != nil {
		_ = proc.shut(false)
		return nil, fmt.Errorf("start relay mux: %w", err)
	}
	m := &boxMux{sess: sess, proc: proc}
	b.mux = m
	go b.stopIdleMux(m, muxIdle)
	return sess, nil
}

var _ ReadyKeeper = (*gvisor)(nil)

// KeepReady implements ReadyKeeper: a kept box's relay mux does not stop when idle, and one is
// started now if none runs.
func (g *gvisor) KeepReady(id string, keep bool) {
	b, err := g.box(id)
	if err != nil {
		return
	}
	b.muxMu.Lock()
	b.keep = keep
	b.muxMu.Unlock()
	if keep {
		ctx, cancel := context.WithTimeout(context.Background(), relaySetupTimeout)
		defer cancel()
		_, _ = g.session(ctx, b)
	}
}

// kept reports whether the box's mux is to be kept however idle.
func (b *gbox) kept() bool {
	b.muxMu.Lock()
	defer b.muxMu.Unlock()
	return b.keep
}

// stopIdleMux stops m once it has had no stream for idle, and returns when m has ended.
func (b *gbox) stopIdleMux(m *boxMux, idle time.Duration) {
	t := time.NewTicker(idle / 3)
	defer t.Stop()
	quiet := 0
	for {
		select {
		case <-m.sess.CloseChan():
			return
		case <-t.C:
		}
		if m.sess.NumStreams() > 0 || b.kept() {
			quiet = 0
			continue
		}
		if quiet++; quiet >= 3 {
			b.stopMux(m.sess)
			return
		}
	}
}

// stopMux stops the box's relay mux if sess (any, when nil) is the running one, and waits until
// its process has exited: a checkpoint must find no host socket in the box.
func (b *gbox) stopMux(sess *yamux.Session) {
	b.muxMu.Lock()
	defer b.muxMu.Unlock()
	m := b.mux
	if m == nil || (sess != nil && m.sess != sess) {
		return
	}
	b.mux = nil
	_ = m.sess.Close()
	_ = m.proc.shut(true)
}
