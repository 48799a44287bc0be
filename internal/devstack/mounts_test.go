package devstack_test

import (
	"bufio"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// unmountLeft detaches whatever is still mounted under dir, deepest first, so that removing
// dir can finish. An engine stopped without its boxes hibernating (a node killed by a test, a
// box still starting as its stack closed) leaves a box's overlay, its disk's loop mount and its
// bind-mounted directory in place, as it must for the next start to adopt them; nothing adopts
// them after a test, and each held a loop device until the machine restarted.
func unmountLeft(t testing.TB, dir string) {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	var left []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		if p := unescapeMountPath(fields[4]); strings.HasPrefix(p, dir+"/") {
			left = append(left, p)
		}
	}
	sort.Slice(left, func(i, j int) bool { return len(left[i]) > len(left[j]) })
	for _, p := range left {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
			t.Errorf("unmount %s left by the test: %v", p, err)
		} else {
			t.Logf("unmounted %s, left by the test", p)
		}
	}
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space and the like).
func unescapeMountPath(p string) string {
	if !strings.Contains(p, `\`) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+3 < len(p) {
			if n, err := strconv.ParseUint(p[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}
