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

// startChild runs postgres as our child. The kernel's parent-death signal is tied to the thread
// that forked, not the process, and Go may retire idle threads; so the child is started from a
// goroutine that locks its thread and keeps it, waiting for the child, until the child is gone.
func (c *Cluster) startChild(ctx context.Context, logf *os.File) error {
	defer logf.Close()
	cmd := c.run.command(c.bins.postgres, "-D", c.dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	dieWithParent(cmd.SysProcAttr)

	started := make(chan error, 1)
	c.exited = make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread must die only after the child.
		if err := cmd.Start(); err != nil {
			started <- err
			close(c.exited)
			return
		}
		started <- nil
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("run postgres: %w", err)
	}
	c.child = cmd.Process
	if err := c.waitReady(ctx); err != nil {
		c.stopChild()
		return err
	}
	return nil
}

// waitReady polls postmaster.pid, as pg_ctl --wait does, until our child reports it is ready.
func (c *Cluster) waitReady(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		pf, ok, err := readPIDFile(c.dir)
		if err != nil {
			return err
		}
		if ok && pf.pid == c.child.Pid && pf.status == pmReady {
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("postgres exited during startup: %v\n%s", c.waitErr, c.logTail())
		case <-ctx.Done():
			return fmt.Errorf("wait for postgres: %w\n%s", ctx.Err(), c.logTail())
		case <-tick.C:
		}
	}
}

// stopChild asks for a fast shutdown (SIGINT) and escalates to immediate (SIGQUIT), then SIGKILL,
// if the server does not exit in time.
func (c *Cluster) stopChild() error {
	steps := []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGINT, 30 * time.Second}, {syscall.SIGQUIT, 10 * time.Second}, {syscall.SIGKILL, 10 * time.Second}}
	for _, s := range steps {
		if err := c.child.Signal(s.sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("stop postgres: %w", err)
		}
		select {
		case <-c.exited:
			return nil
		case <-time.After(s.wait):
		}
	}
	return fmt.Errorf("stop postgres: pid %d did not exit", c.child.Pid)
}

// processExists reports whether any process has pid; EPERM still means it exists.
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
