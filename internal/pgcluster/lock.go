package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// errLocked means another live process holds the lock.
var errLocked = errors.New("locked by another process")

// lockFile takes an exclusive flock on path, creating it. The kernel drops the lock when the
// holder dies however it dies, which is what lets Start tell a server left behind by a crashed
// parent from one still in use. The descriptor is close-on-exec so servers never inherit it.
func lockFile(path string, wait bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, errLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
