//go:build amd64 || arm64

package runtime

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM in a process-runtime box: they reach kernel code that a box
// has no use for and that has carried the host escapes of the last years (module loading,
// kexec, bpf, keyrings, perf, new mounts and namespaces, handle-based opens that walk outside a
// chroot, io_uring). It is a deny-list, like Docker's default profile turned around: whatever
// is not named here is allowed, so ordinary programs keep working.
var deniedSyscalls = []uintptr{
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_REBOOT,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_MOVE_MOUNT,
	unix.SYS_OPEN_TREE, unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK,
	unix.SYS_MOUNT_SETATTR, unix.SYS_UNSHARE, unix.SYS_SETNS,
	unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT, unix.SYS_QUOTACTL,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_CLOCK_ADJTIME, unix.SYS_ADJTIMEX,
	unix.SYS_SYSLOG, unix.SYS_LOOKUP_DCOOKIE, unix.SYS_PERSONALITY,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
}

// namespaceCloneFlags are the clone flags that make new namespaces; clone with any of them
// fails like unshare does. clone3 passes its flags in memory a filter cannot read, so it
// answers ENOSYS and the C library falls back to clone.
const namespaceCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// seccomp_data offsets (linux/seccomp.h): nr, arch, instruction pointer, args[6].
const (
	seccompNr   = 0
	seccompArch = 4
	seccompArg0 = 16
)

// BPF opcodes of the classic instructions the filter uses.
const (
	bpfLdW   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
	bpfJeqK  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
	bpfJsetK = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
	bpfJgeK  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
	bpfRetK  = unix.BPF_RET | unix.BPF_K
)

// seccompFilter builds the box's filter for this architecture: a foreign architecture's
// syscalls (and x86's x32 ABI) are refused outright, the denied list fails with EPERM, clone
// with namespace flags with EPERM, clone3 with ENOSYS, and everything else is allowed.
func seccompFilter() ([]unix.SockFilter, error) {
	const arch uint32 = auditArch
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, K: k, Jt: jt, Jf: jf}
	}
	eperm := stmt(bpfRetK, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	prog := []unix.SockFilter{
		stmt(bpfLdW, seccompArch),
		jump(bpfJeqK, arch, 1, 0),
		stmt(bpfRetK, unix.SECCOMP_RET_KILL_PROCESS),
		stmt(bpfLdW, seccompNr),
	}
	if x32SyscallBit != 0 {
		prog = append(prog, jump(bpfJgeK, x32SyscallBit, 0, 1), eperm)
	}
	for _, nr := range deniedSyscalls {
		prog = append(prog, jump(bpfJeqK, uint32(nr), 0, 1), eperm)
	}
	prog = append(prog,
		jump(bpfJeqK, unix.SYS_CLONE3, 0, 1),
		stmt(bpfRetK, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS)),
		jump(bpfJeqK, unix.SYS_CLONE, 0, 3),
		stmt(bpfLdW, seccompArg0),
		jump(bpfJsetK, namespaceCloneFlags, 0, 1),
		eperm,
		stmt(bpfRetK, unix.SECCOMP_RET_ALLOW),
	)
	if len(prog) > 4096 {
		return nil, errors.New("seccomp filter: too long")
	}
	return prog, nil
}

// installSeccomp loads the filter on the calling thread, which must be locked to its goroutine
// and about to exec: the filter passes to the exec'd program and everything it starts. Without
// no_new_privs, which would break setuid programs in the box: the box's user namespace gives
// the launcher the CAP_SYS_ADMIN that loading a filter then needs.
func installSeccomp() error {
	prog, err := seccompFilter()
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}
	return nil
}
