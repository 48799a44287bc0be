//go:build !linux

package sandboxtest

import "syscall"

// nsAttr is unused where namespaces do not exist: boxes run in host mode.
func nsAttr() *syscall.SysProcAttr { return nil }

// namespacesAvailable is false off Linux: boxes run in host mode.
const namespacesAvailable = false
