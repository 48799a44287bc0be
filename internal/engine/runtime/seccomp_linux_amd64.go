package runtime

import "golang.org/x/sys/unix"

// auditArch is the architecture seccomp reports for this build's system calls; x32SyscallBit
// marks x86's x32 ABI, which a box has no use for.
const (
	auditArch     = unix.AUDIT_ARCH_X86_64
	x32SyscallBit = 0x40000000
)
