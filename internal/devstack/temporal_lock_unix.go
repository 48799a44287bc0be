//go:build unix

package devstack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes an exclusive lock on dir so that two dev servers never share one
// SQLite file: both would claim the same history shards and corrupt each other's state.
// The lock belongs to the open file, so it also stops a second StartTemporal in this process,
// and the kernel drops it when the process dies.
func lockDataDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "temporal.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open temporal lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock temporal data dir: %s is in use by another temporal server", dir)
		}
		return nil, fmt.Errorf("lock temporal data dir: %w", err)
	}
	return f, nil
}
