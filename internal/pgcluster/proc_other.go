//go:build !linux

package pgcluster

import (
	"syscall"
)

// Switching users (and granting the traversal capability) is implemented for Linux only;
// elsewhere the programs run as the current user, so initdb's own root check explains a failure.
func (r runner) sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{}
}

// dieWithParent has no Pdeathsig outside Linux; a separate process group still keeps terminal
// signals away from the server.
func dieWithParent(attr *syscall.SysProcAttr) {
	attr.Setpgid = true
}

func isServer(pid int, dir string) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

func isZombie(pid int) bool { return false }

// serverProcesses is not known outside Linux: postgres' own check of its shared memory speaks.
func serverProcesses(dir string) []int { return nil }
