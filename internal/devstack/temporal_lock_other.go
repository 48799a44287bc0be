//go:build !unix

package devstack

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockDataDir only opens the lock file where flock is missing; the dev stack targets Linux.
func lockDataDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "temporal.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open temporal lock: %w", err)
	}
	return f, nil
}
