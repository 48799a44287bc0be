package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// How the engine reaches into a gVisor box: `runsc exec` of the init binary in relay mode, with
// one end of a host socket pair as its stdin and stdout. runsc hands those descriptors to the
// sandbox, so bytes flow engine ⇄ sentry ⇄ relay ⇄ the box's loopback (or the init's socket)
// with no listener anywhere on the host and no host socket bound inside the box; the relay
// passes EOF each way with shutdown(2). What it costs is one runsc exec per connection. What it
// forbids is a checkpoint while one is open: the relay holds host descriptors, so Hibernate
// refuses until every connection is closed and its relay has exited.

const (
	relaySetupTimeout = 30 * time.Second // runsc exec and the relay's first byte
	relayExitGrace    = 5 * time.Second  // after Close, before the runsc exec is killed
	relayDrainTimeout = 5 * time.Second  // Hibernate's wait for closed relays to exit
)

// relayed is a connection into a box, through a relay process of its own (relayConn) or a
// stream of the box's relay mux (muxConn).
type relayed interface {
	HalfCloser
	isClosed() bool
}

// relayConn is one relayed connection into a box: the engine's end of the socket pair, plus
// the runsc exec process to reap when it closes.
type relayConn struct {
	*net.UnixConn
	cmd    *exec.Cmd
	box    *gbox
	once   sync.Once
	mu     sync.Mutex
	closed bool
}

// Close closes the connection. The relay in the box sees the hang-up and exits; its runsc exec
// is reaped in the background, and only then does the box stop counting the connection.
func (r *relayConn) Close() error { return r.shut(false) }

// shut closes the connection once and reaps the runsc exec, in the background or not.
func (r *relayConn) shut(wait bool) error {
	var err error
	r.once.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		err = r.UnixConn.Close()
		reap := func() {
			waitOrKill(r.cmd, relayExitGrace)
			r.box.untrack(r)
		}
		if wait {
			reap()
		} else {
			go reap()
		}
	})
	return err
}

func (r *relayConn) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// waitRelays waits until every relay of the box has exited, the relay mux included, and fails
// at once if a connection is still open: runsc cannot checkpoint a box holding host sockets.
func (b *gbox) waitRelays(ctx context.Context) error {
	if b.openRelays() == 0 {
		b.stopMux(nil) // it holds a host socket too; the next connection starts it again
	}
	deadline := time.Now().Add(relayDrainTimeout)
	for {
		b.mu.Lock()
		live, open := len(b.relays), 0
		for r := range b.relays {
			if !r.isClosed() {
				open++
			}
		}
		b.mu.Unlock()
		switch {
		case open > 0:
			return fmt.Errorf("%d relay or exec connection(s) still open; close them first (a box holding host sockets cannot be checkpointed)", open)
		case live == 0:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("%d closed relay(s) did not exit", live)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// openRelays counts the connections to the box not closed yet.
func (b *gbox) openRelays() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	open := 0
	for r := range b.relays {
		if !r.isClosed() {
			open++
		}
	}
	return open
}

// untrack forgets a connection that has ended.
func (b *gbox) untrack(r relayed) {
	b.mu.Lock()
	delete(b.relays, r)
	b.mu.Unlock()
}

// closeRelays closes every connection to the box (Destroy).
func (b *gbox) closeRelays() {
	b.mu.Lock()
	rs := make([]relayed, 0, len(b.relays))
	for r := range b.relays {
		rs = append(rs, r)
	}
	b.mu.Unlock()
	for _, r := range rs {
		_ = r.Close()
	}
}

// relay connects to target in the box (see boxproto): the init's exec channel as a stream of the
// box's relay mux, anything else (or everything, in a box whose init has no mux) through a relay
// process of its own. A port's connection keeps its own process because it carries bulk bytes
// (a desktop's frames, a file copy): through one yamux session they moved at a fifth of the
// rate, while an exec's few frames gain the 15 to 20 ms a runsc exec takes to start.
func (g *gvisor) relay(ctx context.Context, b *gbox, target ...string) (relayed, error) {
	if exists(filepath.Join(b.spec.Dir, checkpointDir)) {
		return nil, ErrNotRunning
	}
	if target[0] == "init" {
		if c, ok, err := g.muxRelay(ctx, b, target); ok {
			return c, err
		}
	}
	return g.spawnRelay(ctx, b, true, target...)
}

// spawnRelay starts `cocoonbox-init relay target...` in the box and returns the connected pipe;
// with track, the box counts it among its connections until its process has exited.
func (g *gvisor) spawnRelay(ctx context.Context, b *gbox, track bool, target ...string) (*relayConn, error) {
	id := b.spec.ID
	engineEnd, boxEnd, err := socketPair()
	if err != nil {
		return nil, err
	}
	args := g.args(b.spec.Dir, append([]string{"exec", id, boxproto.InitPath, "relay"}, target...)...)
	cmd := exec.Command(g.runsc, args...)
	stderr := &capBuffer{max: 4096}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = boxEnd, boxEnd, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The relay in the box holds the stderr pipe too; never let a stuck relay hang the reaper.
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	_ = boxEnd.Close()
	if err != nil {
		_ = engineEnd.Close()
		return nil, fmt.Errorf("start relay: %w", err)
	}
	fc, err := net.FileConn(engineEnd)
	_ = engineEnd.Close()
	if err != nil {
		waitOrKill(cmd, 0)
		return nil, fmt.Errorf("start relay: %w", err)
	}
	rc := &relayConn{UnixConn: fc.(*net.UnixConn), cmd: cmd, box: b}
	if track {
		b.mu.Lock()
		b.relays[rc] = true
		b.mu.Unlock()
	}

	// The relay's first byte says whether it reached its target.
	_ = rc.SetReadDeadline(time.Now().Add(relaySetupTimeout))
	stop := context.AfterFunc(ctx, func() { _ = rc.SetReadDeadline(time.Now()) })
	var status [1]byte
	_, err = io.ReadFull(rc.UnixConn, status[:])
	stop()
	if ctx.Err() != nil {
		_ = rc.Close()
		return nil, ctx.Err()
	}
	if err != nil {
		_ = rc.shut(true) // runsc's complaint is complete once it has exited
		return nil, g.relayError(b, stderr.String(), err)
	}
	if status[0] != boxproto.RelayOK {
		msg, _ := io.ReadAll(io.LimitReader(rc.UnixConn, 1024))
		_ = rc.Close()
		return nil, relayRefused(target, msg)
	}
	_ = rc.SetReadDeadline(time.Time{})
	return rc, nil
}

// relayRefused is the error of a relay that could not reach target, with the relay's words.
func relayRefused(target []string, msg []byte) error {
	if target[0] == "tcp" {
		return fmt.Errorf("%w: %s", ErrPortClosed, msg)
	}
	return fmt.Errorf("relay to %s: %s", target[0], msg)
}

// relayError explains a relay that died before its status byte: usually runsc refusing to
// exec in a sandbox that is gone.
func (g *gvisor) relayError(b *gbox, stderr string, err error) error {
	msg := lastLine([]byte(stderr))
	if strings.Contains(msg, "does not exist") || strings.Contains(msg, "not running") ||
		strings.Contains(msg, "stopped") || strings.Contains(msg, "connection refused") {
		return fmt.Errorf("%w: %s", ErrNotRunning, msg)
	}
	return fmt.Errorf("start relay: %w: %s", err, msg)
}

// Exec implements Runtime through the box's init (see boxproto), never as a child of runsc
// exec: gVisor kills those on restore, and a command's background processes must survive.
func (g *gvisor) Exec(ctx context.Context, id string, req ExecRequest) (int, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return -1, fmt.Errorf("%w: empty argv", ErrBadCommand)
	}
	b, err := g.box(id)
	if err != nil {
		return -1, fmt.Errorf("exec in box %s: %w", id, err)
	}
	rc, err := g.relay(ctx, b, "init")
	if err != nil {
		return -1, fmt.Errorf("exec in box %s: %w", id, err)
	}
	defer func() { _ = rc.Close() }()
	return execOver(ctx, rc, req)
}

// Dial implements Runtime.
func (g *gvisor) Dial(ctx context.Context, id string, port int) (HalfCloser, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("dial box %s: bad port %d", id, port)
	}
	b, err := g.box(id)
	if err != nil {
		return nil, fmt.Errorf("dial box %s: %w", id, err)
	}
	rc, err := g.relay(ctx, b, "tcp", strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("dial box %s port %d: %w", id, port, err)
	}
	return rc, nil
}

// waitOrKill reaps cmd, killing it when it has not exited after grace.
func waitOrKill(cmd *exec.Cmd, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-time.After(grace):
	}
	_ = cmd.Process.Kill()
	<-done
}

// waitExit waits until the host process pid has exited. A zombie counts as exited: the
// sandbox's parent is whoever adopted it, and it may reap slowly.
func waitExit(ctx context.Context, pid int, timeout time.Duration) error {
	if pid <= 0 {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return nil
		}
		// The state follows the parenthesised command name, which may itself hold spaces.
		if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("process did not exit")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// capBuffer keeps the first max bytes written to it (runsc's error output).
type capBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (c *capBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
