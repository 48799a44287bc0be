package runtime

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestVolumeMountsOneLoopPerImage: a box's disk mounted again while a lazily detached mount of
// it still lives (a dying sandbox held its box dir at hibernate) goes through the loop device
// already attached to the image, never a second one: two ext4 superblocks writing one image
// corrupt it ("Structure needs cleaning").
func TestVolumeMountsOneLoopPerImage(t *testing.T) {
	dir := filepath.Join(shortTempDir(t), "box")
	must(t, os.MkdirAll(dir, 0o700))
	must(t, makeVolume(dir, 64))
	must(t, mountDisk(dir))
	t.Cleanup(func() {
		_ = unmountOverlay(dir)
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
	// A file held open keeps the detached mount alive, as the dying sandbox's gofer would.
	held, err := os.Create(filepath.Join(diskPath(dir), "held"))
	must(t, err)
	defer func() { _ = held.Close() }()
	first := loopOf(filepath.Join(dir, volumeImage))
	if first == "" {
		t.Fatal("the mounted image has no loop device")
	}
	must(t, unix.Unmount(filepath.Join(dir, volumeDir), unix.MNT_DETACH))
	must(t, unix.Unmount(dir, unix.MNT_DETACH))

	must(t, mountDisk(dir))
	if again := loopOf(filepath.Join(dir, volumeImage)); again != first {
		t.Fatalf("mounted again through %s, not %s", again, first)
	}
	if n := loopsOfImage(t, filepath.Join(dir, volumeImage)); n != 1 {
		t.Fatalf("%d loop devices are attached to the image, want 1", n)
	}
	if _, err := held.WriteString("still the same filesystem"); err != nil {
		t.Fatal(err)
	}
	must(t, held.Sync())
	if b, err := os.ReadFile(filepath.Join(diskPath(dir), "held")); err != nil || string(b) != "still the same filesystem" {
		t.Fatalf("the new mount reads %q, %v: not the same filesystem as the detached one", b, err)
	}
}

// loopsOfImage counts the loop devices whose backing file is img's inode.
func loopsOfImage(t *testing.T, img string) int {
	t.Helper()
	var want unix.Stat_t
	must(t, unix.Stat(img, &want))
	n := 0
	attached, _ := filepath.Glob("/sys/block/loop*/loop")
	for _, p := range attached {
		f, err := os.Open("/dev/" + filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
		_ = f.Close()
		if err == nil && info.Inode == want.Ino && info.Device == want.Dev {
			n++
		}
	}
	return n
}
