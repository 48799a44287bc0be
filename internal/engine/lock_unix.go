//go:build unix

package engine

import (
	"fmt"
	"os"
	"syscall"
)

// lockDir takes a POSIX record lock on path so two engines never manage the same directory.
// A record lock (not flock) dies with the process, so a SIGKILLed engine leaves nothing to
// clean, and it is per process, so a test can open a second Engine on the same Dir to play a
// restart.
func lockDir(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock engine dir: %w", err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock engine dir: another engine is running on %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil // closing the file drops the lock
}
