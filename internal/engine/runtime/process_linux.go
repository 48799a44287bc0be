package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// processSupported: user namespaces, idmapped mounts and overlay mounts need root.
func processSupported() error {
	if os.Geteuid() != 0 {
		return errors.New("the process runtime needs root")
	}
	if _, err := seccompFilter(); err != nil {
		return err
	}
	return nil
}

// startInit starts the box: this binary, re-executed as the launcher (see launch), in new user,
// mount, PID, network, UTS and IPC namespaces, which attaches root (the box's detached overlay:
// the launcher runs as the box's root, an unprivileged host uid that may not walk the path to
// the box's directory), confines itself and then executes the box's init from it. The launcher waits until it is in the box's cgroup. It is reaped
// by a goroutine while this engine lives; after a restart its new parent reaps it.
func startInit(spec Spec, cgroupProcs []string, root *os.File) (initProc, error) {
	console, err := os.OpenFile(filepath.Join(spec.Dir, consoleFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return initProc{}, fmt.Errorf("open console log: %w", err)
	}
	defer func() { _ = console.Close() }()
	exe, err := selfExe()
	if err != nil {
		return initProc{}, err
	}
	defer func() { _ = exe.Close() }()
	syncR, syncW, err := os.Pipe()
	if err != nil {
		return initProc{}, fmt.Errorf("start init: %w", err)
	}
	defer func() { _ = syncR.Close(); _ = syncW.Close() }()
	cmd := &exec.Cmd{
		Path:       "/proc/self/fd/3", // exe: the launcher runs as the box's root, which may not reach its path
		Args:       []string{launchName},
		Env:        boxEnv(spec),
		Dir:        "/",
		Stdout:     console,
		Stderr:     console,
		ExtraFiles: []*os.File{exe, syncR, root}, // 3, 4 and 5
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
				syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC,
			UidMappings:                boxIDMappings(),
			GidMappings:                boxIDMappings(),
			GidMappingsEnableSetgroups: true,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
			Setsid:                     true,
		},
	}
	if err := cmd.Start(); err != nil {
		return initProc{}, fmt.Errorf("start init: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	for _, f := range cgroupProcs {
		if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			_ = cmd.Process.Kill()
			return initProc{}, fmt.Errorf("join cgroup: %w", err)
		}
	}
	start, ok := procStart(pid)
	if !ok {
		return initProc{}, errors.New("start init: it exited at once (see console.log)")
	}
	if _, err := syncW.Write([]byte{0}); err != nil {
		_ = cmd.Process.Kill()
		return initProc{}, fmt.Errorf("start init: %w", err)
	}
	return initProc{Pid: pid, Start: start}, nil
}

// dialIn connects to addr from inside the network namespace of process pid. The goroutine's
// thread enters the namespace and is never unlocked, so Go ends the thread with the goroutine
// and nothing else ever runs in the box's namespace; the socket keeps the namespace it was made in.
func dialIn(ctx context.Context, pid int, network, addr string) (net.Conn, error) {
	ns, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return nil, fmt.Errorf("open box network namespace: %w", err)
	}
	defer func() { _ = ns.Close() }()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("enter box network namespace: %w", err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
