package pgcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// pidFile is what the postmaster records in postmaster.pid, line by line: pid, data directory,
// start time, port, first socket directory, first listen address, shared memory key, status.
type pidFile struct {
	pid     int
	sockDir string
	status  string
}

// pmReady is the status line of a server accepting connections; pg_ctl --wait polls for it too.
const pmReady = "ready"

func readPIDFile(dir string) (pidFile, bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if errors.Is(err, fs.ErrNotExist) {
		return pidFile{}, false, nil
	}
	if err != nil {
		return pidFile{}, false, fmt.Errorf("read postmaster.pid: %w", err)
	}
	lines := strings.Split(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil {
		// The postmaster writes the file in one go; a torn read means it is starting right now.
		return pidFile{}, false, nil
	}
	pf := pidFile{pid: pid}
	if len(lines) > 4 {
		pf.sockDir = strings.TrimSpace(lines[4])
	}
	if len(lines) > 7 {
		pf.status = strings.TrimSpace(lines[7])
	}
	return pf, true, nil
}

// runningPID returns the pid of the postmaster serving dir, or 0 when none is alive.
func runningPID(dir string) (int, error) {
	pf, ok, err := readPIDFile(dir)
	if err != nil || !ok {
		return 0, err
	}
	if !isServer(pf.pid, dir) {
		return 0, nil
	}
	return pf.pid, nil
}
