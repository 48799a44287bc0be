package devstack_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
	"github.com/loomhand/cocoonbox/internal/worker"
)

// smallDisk mounts a fresh ext4 filesystem of size MiB, from a file under t's temp dir, at dir,
// and unmounts it when the test ends.
func smallDisk(t *testing.T, dir string, mib int) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "disk.img")
	for _, args := range [][]string{
		{"truncate", "-s", strconv.Itoa(mib) + "M", img},
		{"mkfs.ext4", "-q", "-F", "-m", "0", img},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", args[0], err, out)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a %d MiB loop filesystem at %s: %v: %s", mib, dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// TestSnapshotWithDiskFull: with the engine's checkpoint disk full (a small loop-mounted
// filesystem under its data dir), a snapshot answers within the caller's deadline with
// unavailable naming the full disk, box show says what it waits for, the box keeps running with
// its file intact and a failed checkpoint leaves nothing on the disk; once space is freed the
// retried snapshot completes exactly once, with nothing left for the reconciler.
func TestSnapshotWithDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	ckdir := filepath.Join(cfg.DataDir("engine"), "checkpoints")
	smallDisk(t, ckdir, 64)
	filler := filepath.Join(ckdir, "filler")
	var fs syscall.Statfs_t
	if err := syscall.Statfs(ckdir, &fs); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("fallocate", "-l", strconv.FormatUint(fs.Bavail*uint64(fs.Bsize)-1<<20, 10), filler).CombinedOutput(); err != nil {
		t.Fatalf("fallocate: %v: %s", err, out)
	}
	d, ctx, owner, eng := newBoxEnv(t, cfg, 4*time.Minute)
	id, ref := createBox(ctx, t, d, owner.ID, eng)
	sum := mustExec(ctx, t, eng, ref, "head -c 8388608 /dev/urandom > /root/data && sha256sum /root/data")

	const deadline = 20 * time.Second
	callCtx, cancel := context.WithTimeout(ctx, deadline)
	t0 := time.Now()
	_, err := d.Boxes.Snapshot(callCtx, owner.ID, id)
	cancel()
	t.Logf("snapshot with the disk full answered after %s: %v", time.Since(t0).Round(time.Millisecond), err)
	const full = "the engine host's disk is full"
	if cocoonbox.ErrorCode(err) != cocoonbox.EUnavailable || !strings.Contains(err.Error(), full) {
		t.Fatalf("snapshot with the disk full: %v; want unavailable saying %q", err, full)
	}
	if v, err := d.Boxes.Get(ctx, owner.ID, id); err != nil || !strings.Contains(v.Waiting, full) {
		t.Errorf("box show while the disk is full: waiting %q, %v; want it to say %q", v.Waiting, err, full)
	}
	if got := strings.Fields(mustExec(ctx, t, eng, ref, "sha256sum /root/data")); len(got) == 0 || got[0] != strings.Fields(sum)[0] {
		t.Errorf("the box's file while the disk is full: %v, want %s", got, sum)
	}
	if left := checkpointDirs(t, ckdir); len(left) != 0 {
		t.Errorf("failed checkpoints left on the full disk: %v", left)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var seen string
	testutil.Eventually(t, testutil.WaitLong, "the retried snapshot complete once space is freed", func() bool {
		snaps, err := d.Store.ListSnapshots(ctx, id)
		seen = fmt.Sprintf("%+v, %v", snaps, err)
		return err == nil && len(snaps) == 1 && snaps[0].State == cocoonbox.SnapshotComplete
	}, &seen)
	testutil.Eventually(t, testutil.WaitLong, "the box running again", func() bool {
		v, err := d.Boxes.Get(ctx, owner.ID, id)
		seen = fmt.Sprintf("%s %q %v", v.State, v.Waiting, err)
		return err == nil && v.State == cocoonbox.BoxStateRunning && v.Waiting == ""
	}, &seen)
	if _, err := d.Boxes.Snapshot(ctx, owner.ID, id); err != nil {
		t.Fatalf("a snapshot after the disk was freed: %v", err)
	}
	if snaps, err := d.Store.ListSnapshots(ctx, id); err != nil || len(snaps) != 2 {
		t.Errorf("snapshots: %+v, %v; want the retried one and the new one", snaps, err)
	}
	rec := &worker.Reconciler{Temporal: d.Temporal, Store: d.Store, Engine: eng,
		Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.Now().Add(time.Hour) }}
	if n, err := rec.Once(ctx); err != nil || n != (worker.Settled{}) {
		t.Errorf("left for the reconciler: %+v, %v", n, err)
	}
}

// checkpointDirs lists the checkpoint directories under dir that have no record beside them: a
// failed checkpoint's leftovers.
func checkpointDirs(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range ents {
		if !e.IsDir() || e.Name() == "lost+found" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name()+".json")); err != nil {
			left = append(left, e.Name())
		}
	}
	return left
}
