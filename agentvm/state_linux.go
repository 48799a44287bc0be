package agentvm

import (
	"time"

	"golang.org/x/sys/unix"
)

// lchtimes sets a symlink's own mtime; os.Chtimes would follow it.
func lchtimes(p string, mtime time.Time) error {
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(mtime.UnixNano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}
