//go:build !linux

package tools

import "os/exec"

// setProcessGroup leaves the default: cancellation kills the command's own process only.
func setProcessGroup(cmd *exec.Cmd) {}
