package tools_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/loomhand/cocoonbox/agentvm/tools"
)

// TestShellTimeoutKillsTheCommandAndItsChildren: a command that runs out of its time is killed
// with everything it started. A child left behind would go on running after the call answered
// (the call stops waiting for the output it holds open after a grace period), so the test looks
// at the child itself rather than at how long the call took.
func TestShellTimeoutKillsTheCommandAndItsChildren(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	args, err := json.Marshal(map[string]any{
		"command":         "sleep 300 & echo $! > " + pidFile + "; exec sleep 300",
		"timeout_seconds": 1,
	})
	require.NoError(t, err)
	res, err := call(t, tools.Shell{}, string(args))
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, res.Text, "timed out after 1s")

	data, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // exited and reaped already
	}
	require.NoError(t, err)
	defer func() {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) // a child the tool left is the test's to end
		_ = unix.Close(fd)
	}()
	// A pidfd polls readable once its process has exited; the child was to sleep for 300 s,
	// and a killed one is gone at once: the poll's bound only keeps a failure from hanging.
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 10_000)
	for errors.Is(err, unix.EINTR) {
		n, err = unix.Poll(fds, 10_000)
	}
	require.NoError(t, err)
	require.Equal(t, 1, n, "the background child of the timed-out command still runs")
}
