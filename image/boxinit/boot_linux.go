package main

import (
	"fmt"
	"os"
	"syscall"
)

// bootHookPath is the image's boot hook: a program the init starts once when the box boots, so
// an image can run services (the desktop image starts its X server and session) without the
// engine knowing about them. Images without one boot to an idle init.
const bootHookPath = "/etc/cocoonbox/boot"

// bootHook says whether the init should run the boot hook at path: no file means no hook, and
// a hook that is there but not an executable regular file is a broken image, which the caller
// reports on the console rather than failing the box.
func bootHook(path string) (bool, error) {
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("boot hook: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return false, fmt.Errorf("boot hook %s: not an executable file (%s)", path, fi.Mode())
	}
	return true, nil
}

// startBoot spawns the boot hook, if the image has one, as a child of the init: gVisor restores
// the init's descendants with the box but kills what `runsc exec` started, so only this way does
// what the hook starts survive hibernate and wake. It runs only when the init starts fresh; a
// restored init resumes with its memory and never comes back here. Its output goes to the
// init's own stdout and stderr (the box's console log); its exit is logged there too.
func startBoot(r *reaper, path string) {
	run, err := bootHook(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cocoonbox-init:", err)
	}
	if !run {
		return
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cocoonbox-init: boot hook:", err)
		return
	}
	defer func() { _ = null.Close() }()
	pid, exited, err := r.spawn(path, []string{path}, os.Environ(), "/", []uintptr{null.Fd(), 1, 2})
	if err != nil {
		fmt.Fprintf(os.Stderr, "cocoonbox-init: start boot hook %s: %v\n", path, err)
		return
	}
	go func() {
		ws := <-exited
		fmt.Fprintf(os.Stderr, "cocoonbox-init: boot hook %s (pid %d) ended: %s\n", path, pid, describeExit(ws))
	}()
}

func describeExit(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}
