package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// setupEnv asks the init to set up the box's mounts itself: the process runtime starts it in
// fresh namespaces on a bare overlay, while runsc has already done this under gVisor.
const setupEnv = "COCOONBOX_INIT_SETUP"

// serveInit runs the box's init: it reaps every orphan and spawns the commands the engine asks
// for over the abstract socket, as its own children so that they survive a checkpoint/restore.
func serveInit() error {
	// Run by mistake on a host, it would reap strangers' children and take commands from anyone
	// in the host's network namespace.
	if os.Getpid() != 1 {
		return fmt.Errorf("serves only as a box's PID 1 (see cocoonbox-init relay)")
	}
	if os.Getenv(setupEnv) == "namespaces" {
		if err := setupNamespaces(); err != nil {
			return fmt.Errorf("set up box: %w", err)
		}
	} else if err := dropBounding(unix.CAP_SYS_ADMIN); err != nil {
		// Under gVisor the engine gives the init CAP_SYS_ADMIN to set a fork's hostname;
		// nothing it starts may have it.
		return fmt.Errorf("set up box: %w", err)
	}
	_ = os.Unsetenv(setupEnv)

	r := &reaper{waiters: map[int]chan syscall.WaitStatus{}}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)

	ln, err := net.Listen("unix", boxproto.SocketName)
	if err != nil {
		return fmt.Errorf("listen %s: %w", boxproto.SocketName, err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				fmt.Fprintln(os.Stderr, "cocoonbox-init: accept:", err)
				continue
			}
			go serveConn(c, r)
		}
	}()

	// After the socket is up, so the engine can reach the init while the hook is starting.
	startBoot(r, bootHookPath)

	// Orphans may already exist (a restored box); reap once before waiting for signals.
	r.reap()
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			r.reap()
			continue
		}
		// SIGTERM/SIGINT (runsc kill, or the process runtime stopping the box): leaving ends the
		// box, and the kernel kills everything else in its PID namespace.
		return nil
	}
	return nil
}

// reaper owns wait4: as PID 1 the init must reap orphans, so no goroutine may wait for its own
// child directly. Spawn registers the child under the same lock the reaper delivers under, so
// a child that exits at once still reaches its waiter.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]chan syscall.WaitStatus
}

// spawn starts argv in its own process group (so a kill reaches its whole tree) and returns a
// channel that receives its wait status.
func (r *reaper) spawn(path string, argv, env []string, dir string, files []uintptr) (int, <-chan syscall.WaitStatus, error) {
	ch := make(chan syscall.WaitStatus, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Dir: dir, Env: env, Files: files,
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return 0, nil, err
	}
	r.waiters[pid] = ch
	return pid, ch, nil
}

// reap collects every exited child; SIGCHLDs coalesce, so it loops until none is left.
func (r *reaper) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		if ch := r.waiters[pid]; ch != nil {
			ch <- ws
			delete(r.waiters, pid)
		}
		r.mu.Unlock()
	}
}
