package runtime

import "golang.org/x/sys/unix"

// auditArch is the architecture seccomp reports for this build's system calls; arm64 has no
// second ABI to refuse.
const (
	auditArch     = unix.AUDIT_ARCH_AARCH64
	x32SyscallBit = 0
)
