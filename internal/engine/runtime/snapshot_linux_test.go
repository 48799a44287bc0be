package runtime

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

// flipPy swaps, as fast as the box allows, each of eight entries under /root/flip between a
// directory (holding a decoy master.key) and a symlink to a host directory given as argv[1]. A
// host walker that checks an entry is a directory and then opens a path through it reads the
// host's files.
const flipPy = `
import os, sys
host = sys.argv[1]
os.makedirs("/root/flip", exist_ok=True)
names = ["/root/flip/d%d" % i for i in range(8)]
for n in names:
    os.makedirs(n + ".dir", exist_ok=True)
    with open(n + ".dir/master.key", "w") as f:
        f.write("decoy")
    os.symlink(host, n + ".lnk")
open("/root/flip/started", "w").close()
flips = 0
while True:
    for n in names:
        os.rename(n + ".dir", n)
        os.rename(n, n + ".dir")
        os.rename(n + ".lnk", n)
        os.rename(n, n + ".lnk")
    flips += 1
    if flips % 500 == 0:
        with open("/root/flip/count.tmp", "w") as f:
            f.write(str(flips))
        os.rename("/root/flip/count.tmp", "/root/flip/count")
`

// TestGVisorSnapshotNeverFollowsBoxSymlinks: a process in the box flips directories and
// symlinks to a host directory holding a canary (as the engine's data dir holds the master key)
// while 200 snapshots run. No snapshot holds the canary, nor does a box seeded from one, and
// every snapshot succeeds: the copy reads a box that cannot change under it.
func TestGVisorSnapshotNeverFollowsBoxSymlinks(t *testing.T) {
	e := newTestEnv(t, NameGVisor)
	keys := filepath.Join(e.data, "keys")
	if err := os.MkdirAll(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	canary := "canary-" + newID()
	if err := os.WriteFile(filepath.Join(keys, "master.key"), []byte(canary), 0o600); err != nil {
		t.Fatal(err)
	}
	b := e.start(t, e.spec())
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()
	code, err := e.rt.Exec(ctx, b.ID, ExecRequest{
		Argv:  []string{"sh", "-c", "cat > /root/flip.py && { setsid python3 /root/flip.py " + keys + " </dev/null >/tmp/flip.log 2>&1 & }"},
		Stdin: strings.NewReader(flipPy),
	})
	if err != nil || code != 0 {
		t.Fatalf("start the flipper: %d, %v", code, err)
	}
	testutil.Eventually(t, testutil.WaitShort, "the flipper to start", func() bool {
		_, _, code, _ := e.exec(b.ID, "test", "-e", "/root/flip/started")
		return code == 0
	})

	snaps := shortTempDir(t)
	var last string
	var failed []string
	t0 := time.Now()
	for i := range 200 {
		dst := filepath.Join(snaps, strconv.Itoa(i))
		sctx, scancel := context.WithTimeout(context.Background(), testutil.WaitLong)
		err := e.rt.Snapshot(sctx, b.ID, dst)
		scancel()
		if err != nil {
			failed = append(failed, err.Error())
			continue
		}
		if p := findBytes(t, filepath.Join(dst, diskDir), canary); p != "" {
			t.Fatalf("snapshot %d holds the host's canary in %s", i, p)
		}
		if last != "" {
			_ = os.RemoveAll(last)
		}
		last = dst
	}
	t.Logf("200 snapshots of a running box, each paused for its copy: %v each", time.Since(t0)/200)
	if len(failed) > 0 {
		t.Fatalf("%d of 200 snapshots failed; first: %s", len(failed), failed[0])
	}
	flips := strings.TrimSpace(e.sh(t, b.ID, "cat /root/flip/count 2>/dev/null || echo 0"))
	t.Logf("the flipper swapped each entry %s times or more during the snapshots", flips)
	if n, _ := strconv.Atoi(flips); n == 0 {
		t.Fatal("the flipper never ran during the snapshots")
	}

	nb := e.spec()
	ctx, cancel = context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()
	if err := e.rt.Seed(ctx, nb, last); err != nil {
		t.Fatal(err)
	}
	e.start(t, nb)
	// A scan of the box's whole filesystem: seconds alone, more beside a loaded test run.
	if got := e.shWithin(t, testutil.WaitLong, nb.ID, "grep -rl "+canary+" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev || true"); got != "" {
		t.Fatalf("a box seeded from a snapshot reads the host's canary in %s", got)
	}
}

// findBytes returns the first regular file under root (never following a symlink) that
// contains s, or "".
func findBytes(t *testing.T, root, s string) string {
	t.Helper()
	found := ""
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || found != "" || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(s)) {
			found = p
		}
		return nil
	})
	if err != nil {
		t.Fatalf("search %s: %v", root, err)
	}
	return found
}

// TestGVisorBoxFilesNeverActOnTheHost: a box's Dir is the engine's alone (0700) and, while the
// box runs (after a wake too), its disk and root are on nosuid,nodev mounts, so a setuid binary
// the box writes is never one on the host.
func TestGVisorBoxFilesNeverActOnTheHost(t *testing.T) {
	e := newTestEnv(t, NameGVisor)
	b := e.start(t, e.spec())
	e.sh(t, b.ID, "cp /bin/true /root/suid && chmod 4755 /root/suid")
	check := func(when string) {
		t.Helper()
		if fi, err := os.Stat(b.Dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: box dir %v, %v; want 0700", when, fi.Mode(), err)
		}
		suid := filepath.Join(diskPath(b.Dir), "root", "suid")
		if fi, err := os.Stat(suid); err != nil || fi.Mode()&os.ModeSetuid == 0 {
			t.Fatalf("%s: the box's setuid file on the host: %v, %v", when, fi.Mode(), err)
		}
		for _, p := range []string{suid, filepath.Join(b.Dir, rootfsDir, "root", "suid")} {
			var st unix.Statfs_t
			if err := unix.Statfs(p, &st); err != nil {
				t.Fatal(err)
			}
			if st.Flags&unix.ST_NOSUID == 0 || st.Flags&unix.ST_NODEV == 0 {
				t.Fatalf("%s: %s is on a mount without nosuid,nodev (flags %#x)", when, p, st.Flags)
			}
		}
	}
	check("after start")
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()
	if err := e.rt.Hibernate(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Wake(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	check("after wake")
}
