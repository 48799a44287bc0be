package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

// TestBoxDiskQuota: a box that writes past its disk quota gets "No space left on device" in the
// box, and the host stores no more than the quota; what the box deletes is given back to the
// host; files and quota outlast a hibernate, a snapshot of the sleeping box and a wake; and a
// checkpoint too big for a smaller disk is refused with ErrDiskFull, leaving no directory.
func TestBoxDiskQuota(t *testing.T) {
	for _, name := range []string{NameGVisor, NameProcess} {
		t.Run(name, func(t *testing.T) {
			e := newTestEnv(t, name)
			spec := e.spec()
			spec.DiskMB = 64
			b := e.start(t, spec)
			img := filepath.Join(spec.Dir, volumeImage)
			ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
			defer cancel()

			fill := func() {
				t.Helper()
				_, errOut, code, err := e.exec(b.ID, "dd", "if=/dev/zero", "of=/big", "bs=1M", "count=100")
				if err != nil || code == 0 || !strings.Contains(errOut, "No space left on device") {
					t.Fatalf("writing 100 MiB on a 64 MiB disk: code %d, err %v, stderr %q", code, err, errOut)
				}
				if got := hostBytes(t, img); got > 72<<20 {
					t.Fatalf("the host stores %d MiB for a 64 MiB disk", got>>20)
				}
			}
			fill()
			st, err := e.rt.Stats(ctx, b.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !st.DiskMeasured || st.DiskBytes > 64<<20 || st.DiskBytes < 48<<20 || st.DiskUsedBytes < st.DiskBytes*3/4 {
				t.Errorf("stats of the full disk: %+v", st)
			}

			e.sh(t, b.ID, "rm /big && sync")
			testutil.Eventually(t, testutil.WaitShort, "the host to get the deleted file's space back", func() bool { return hostBytes(t, img) < 32<<20 })
			if got := e.sh(t, b.ID, "head -c 20971520 /dev/zero > /kept && sync && wc -c < /kept"); got != "20971520\n" {
				t.Fatalf("after deleting, the box wrote %q bytes", got)
			}

			if err := e.rt.Hibernate(ctx, b.ID); err != nil {
				t.Fatal(err)
			}
			if mounted(filepath.Join(spec.Dir, volumeDir)) {
				t.Error("a hibernated box's disk is still mounted")
			}
			ck := filepath.Join(shortTempDir(t), "ck")
			if err := e.rt.Snapshot(ctx, b.ID, ck); err != nil {
				t.Fatal(err)
			}
			if mounted(filepath.Join(spec.Dir, volumeDir)) {
				t.Error("a snapshot of a hibernated box left its disk mounted")
			}
			if err := e.rt.Wake(ctx, b.ID); err != nil {
				t.Fatal(err)
			}
			if got := e.sh(t, b.ID, "wc -c < /kept"); got != "20971520\n" {
				t.Fatalf("after a wake the box has %q bytes of its file", got)
			}
			fill()

			small := e.spec()
			small.DiskMB = 16
			err = e.rt.Seed(ctx, small, ck)
			if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "16 MiB") {
				t.Fatalf("seeding a 16 MiB disk with 20 MiB of files: %v", err)
			}
			if _, err := os.Stat(small.Dir); !os.IsNotExist(err) {
				t.Errorf("a failed seed left %s: %v", small.Dir, err)
			}
			if loops := loopsUnder(small.Dir); len(loops) != 0 {
				t.Errorf("a failed seed left loop devices %v", loops)
			}
			fits := e.spec()
			fits.DiskMB = 64
			if err := e.rt.Seed(ctx, fits, ck); err != nil {
				t.Fatal(err)
			}
			e.start(t, fits)
			if got := e.sh(t, fits.ID, "wc -c < /kept"); got != "20971520\n" {
				t.Fatalf("a box seeded from the snapshot has %q bytes of its file", got)
			}
		})
	}
}

// hostBytes is what the file at p takes on the host's disk.
func hostBytes(t *testing.T, p string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(fmt.Errorf("stat disk image: %w", err))
	}
	return st.Blocks * 512
}
