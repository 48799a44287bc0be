package sandboxtest

import (
	"os"
	"syscall"
)

// nsAttr puts a box's init in new mount and PID namespaces, and in a new user namespace when not
// root (so an unprivileged test run can still bind-mount). The box dies with the test binary.
func nsAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		Pdeathsig:  syscall.SIGKILL,
	}
	if os.Geteuid() != 0 {
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	return a
}

// namespacesAvailable is true where boxes can get their own namespaces.
const namespacesAvailable = true
