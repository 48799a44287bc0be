//go:build !linux

package agentvm

import (
	"os"
	"time"
)

// lchtimes leaves a symlink's mtime as extraction set it: only the Linux agent (the one in
// boxes) restores it.
func lchtimes(string, time.Time) error { return nil }

// owner is unknown off Linux: the tree keeps the agent's.
func owner(os.FileInfo) (uid, gid int, ok bool) { return 0, 0, false }
