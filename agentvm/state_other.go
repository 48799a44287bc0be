//go:build !linux

package agentvm

import "time"

// lchtimes leaves a symlink's mtime as extraction set it: only the Linux agent (the one in
// boxes) restores it.
func lchtimes(string, time.Time) error { return nil }
