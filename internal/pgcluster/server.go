package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startDaemon starts the server the way an administrator would, with pg_ctl: it detaches into its
// own session and outlives this process, and the next Start cleans up after a crash of ours.
func (c *Cluster) startDaemon(ctx context.Context) error {
	secs := 60
	if dl, ok := ctx.Deadline(); ok {
		secs = max(1, int(time.Until(dl).Seconds()))
	}
	cmd := c.run.command(c.bins.pgctl, "start", "--silent", "--wait",
		"--timeout="+strconv.Itoa(secs), "--pgdata="+c.dir, "--log="+c.LogFile())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runContext(ctx, cmd); err != nil {
		// pg_ctl may have launched a postmaster that never became ready; do not leave it behind.
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c.pgctlStop(stopCtx, "immediate")
		return fmt.Errorf("pg_ctl start: %w: %s\n%s", err, strings.TrimSpace(out.String()), c.logTail())
	}
	return nil
}

// pgctlStop stops the server in dir if one runs; mode is fast or immediate. It waits for the
// process itself rather than letting pg_ctl wait for postmaster.pid to go: a server that crashes
// while stopping never removes that file, and pg_ctl would wait out its whole timeout. A fast
// shutdown that does not finish in time is escalated to immediate, which is crash-safe (WAL replay
// on the next start).
func (c *Cluster) pgctlStop(ctx context.Context, mode string) error {
	pid, err := runningPID(c.dir)
	if err != nil || pid == 0 {
		return err
	}
	cmd := c.run.command(c.bins.pgctl, "stop", "--silent", "--no-wait", "--mode="+mode, "--pgdata="+c.dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runContext(ctx, cmd); err != nil && isServer(pid, c.dir) {
		return fmt.Errorf("pg_ctl stop: %w: %s", err, strings.TrimSpace(out.String()))
	}
	wait := 30 * time.Second
	if mode == "immediate" {
		wait = 10 * time.Second
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for isServer(pid, c.dir) {
		select {
		case <-waitCtx.Done():
			if mode != "immediate" && ctx.Err() == nil {
				return c.pgctlStop(ctx, "immediate")
			}
			return fmt.Errorf("pg_ctl stop: postgres pid %d still runs: %w", pid, waitCtx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// waitReaped waits until init has reaped pid if it is a zombie; see isZombie.
func waitReaped(ctx context.Context, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for isZombie(pid) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for exited postgres pid %d to be reaped: %w", pid, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// serverProc is one run of the server as our child (DieWithParent mode).
type serverProc struct {
	p      *os.Process
	exited chan struct{} // closed when the process has exited; err is set before
	err    error
}

// startChild runs postgres as our child. The kernel's parent-death signal is tied to the thread
// that forked, not the process, and Go may retire idle threads; so the child is started from a
// goroutine that locks its thread and keeps it, waiting for the child, until the child is gone.
func (c *Cluster) startChild(ctx context.Context, logf *os.File) error {
	defer logf.Close()
	cmd := c.run.command(c.bins.postgres, "-D", c.dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	dieWithParent(cmd.SysProcAttr)

	started := make(chan error, 1)
	p := &serverProc{exited: make(chan struct{})}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread must die only after the child.
		if err := cmd.Start(); err != nil {
			p.err = err
			started <- err
			close(p.exited)
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("run postgres: %w", err)
	}
	p.p = cmd.Process
	c.proc.Store(p)
	if err := c.waitReady(ctx, p); err != nil {
		p.stop()
		return err
	}
	return nil
}

// waitReady polls postmaster.pid, as pg_ctl --wait does, until our child reports it is ready.
func (c *Cluster) waitReady(ctx context.Context, p *serverProc) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		pf, ok, err := readPIDFile(c.dir)
		if err != nil {
			return err
		}
		if ok && pf.pid == p.p.Pid && pf.status == pmReady {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("postgres exited during startup: %v\n%s", p.err, c.logTail())
		case <-ctx.Done():
			return fmt.Errorf("wait for postgres: %w\n%s", ctx.Err(), c.logTail())
		case <-tick.C:
		}
	}
}

// stop asks for a fast shutdown (SIGINT) and escalates to immediate (SIGQUIT), then SIGKILL,
// if the server does not exit in time.
func (p *serverProc) stop() error {
	steps := []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGINT, 30 * time.Second}, {syscall.SIGQUIT, 10 * time.Second}, {syscall.SIGKILL, 10 * time.Second}}
	for _, s := range steps {
		if err := p.p.Signal(s.sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("stop postgres: %w", err)
		}
		select {
		case <-p.exited:
			return nil
		case <-time.After(s.wait):
		}
	}
	return fmt.Errorf("stop postgres: pid %d did not exit", p.p.Pid)
}

// Done is closed when the server process started last has exited, on its own or by Stop; a
// supervisor selects on it to notice a server that died. Only a DieWithParent cluster has a
// process of its own to watch: for a daemon it is nil, and a receive from it blocks forever.
func (c *Cluster) Done() <-chan struct{} {
	if p := c.proc.Load(); p != nil {
		return p.exited
	}
	return nil
}

// Pid is the server's pid in DieWithParent mode (0 otherwise), for a test that kills it.
func (c *Cluster) Pid() int {
	if p := c.proc.Load(); p != nil {
		return p.p.Pid
	}
	return 0
}

// ExitError says how the server process started last ended, once Done is closed.
func (c *Cluster) ExitError() error {
	p := c.proc.Load()
	if p == nil {
		return nil
	}
	select {
	case <-p.exited:
		if p.err == nil {
			return errors.New("exited with status 0")
		}
		return p.err
	default:
		return nil
	}
}

// Restart starts the server again after its process exited on its own (a crash, the OOM killer),
// with the options Start had, the same socket and the same lock, so the URLs handed out before
// stay valid and pooled clients reconnect to it. Crash recovery (WAL replay) is the server's own.
// Only a DieWithParent cluster can be restarted.
func (c *Cluster) Restart(ctx context.Context) error {
	p := c.proc.Load()
	if p == nil {
		return errors.New("restart postgresql: only a server started with DieWithParent is watched and restarted")
	}
	select {
	case <-p.exited:
	default:
		return fmt.Errorf("restart postgresql: pid %d is still running", p.p.Pid)
	}
	c.closeAdmin()
	if err := c.start(ctx, c.opts); err != nil {
		return fmt.Errorf("restart postgresql: %w", err)
	}
	return nil
}

// processExists reports whether any process has pid; EPERM still means it exists.
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
