package runtime

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCopyDiskKeepsTheDisk: the confined walker keeps everything an overlay upper layer is made
// of and cp -a kept — contents, owners, modes with setuid bits, times, xattrs (trusted.overlay.*
// too), whiteouts, hard links, symlinks as symlinks, fifos, sockets, holes — and leaves out real
// device nodes.
func TestCopyDiskKeepsTheDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the disk copy needs root (owners, whiteouts, trusted xattrs, namespaces)")
	}
	base := shortTempDir(t)
	host := filepath.Join(base, "host")
	must(t, os.MkdirAll(host, 0o700))
	must(t, os.WriteFile(filepath.Join(host, "master.key"), []byte("canary"), 0o600))

	src := filepath.Join(base, "box")
	disk := filepath.Join(src, diskDir)
	p := func(rel string) string { return filepath.Join(disk, rel) }
	must(t, os.MkdirAll(p("etc/opaque"), 0o755))
	must(t, os.MkdirAll(p("home/user/private"), 0o700))
	must(t, os.WriteFile(p("etc/passwd"), []byte("root:x:0:0\n"), 0o644))
	must(t, os.WriteFile(p("usr-bin-sudo"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Chown(p("usr-bin-sudo"), 0, 0))
	must(t, unix.Chmod(p("usr-bin-sudo"), 0o4755))
	must(t, os.Chown(p("home/user"), 1000, 1000))
	must(t, os.Chown(p("home/user/private"), 1000, 1000))
	must(t, os.WriteFile(p("home/user/notes"), []byte("notes"), 0o640))
	must(t, os.Chown(p("home/user/notes"), 1000, 2000))
	must(t, unix.Setxattr(p("etc/opaque"), "trusted.overlay.opaque", []byte("y"), 0))
	must(t, unix.Setxattr(p("home/user/notes"), "user.tag", []byte("kept"), 0))
	must(t, unix.Mknod(p("etc/deleted"), unix.S_IFCHR|0o600, 0)) // a whiteout
	must(t, unix.Mknod(p("etc/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, unix.Mkfifo(p("home/user/fifo"), 0o600))
	l, err := net.Listen("unix", p("home/user/sock"))
	must(t, err)
	defer func() { _ = l.Close() }()
	must(t, os.Link(p("etc/passwd"), p("home/user/passwd-link")))
	must(t, os.Symlink(host, p("home/user/escape")))
	must(t, os.Symlink("../etc/passwd", p("home/relative")))
	f, err := os.Create(p("sparse"))
	must(t, err)
	_, err = f.WriteAt([]byte("end"), 1<<30)
	must(t, err)
	must(t, f.Close())
	old := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	for _, rel := range []string{"etc/passwd", "home/user", "home/user/notes", "etc"} {
		must(t, os.Chtimes(p(rel), old, old))
	}
	must(t, unix.Lutimes(p("home/relative"), []unix.Timeval{unix.NsecToTimeval(old.UnixNano()), unix.NsecToTimeval(old.UnixNano())}))

	// A snapshot's copy, then a box disk (its own filesystem) seeded from that copy: each keeps
	// the disk.
	dst := filepath.Join(base, "copy")
	if err := copyDisk(context.Background(), src, dst); err != nil {
		t.Fatal(err)
	}
	seeded := Spec{ID: "sb_seeded", Dir: filepath.Join(base, "seeded"), DiskMB: 2048}
	if err := seedDisk(context.Background(), seeded, dst); err != nil {
		t.Fatal(err)
	}
	must(t, mountDisk(seeded.Dir))
	t.Cleanup(func() { must(t, unmountOverlay(seeded.Dir)) })
	for _, copied := range []string{filepath.Join(dst, diskDir), diskPath(seeded.Dir)} {
		q := func(rel string) string { return filepath.Join(copied, rel) }
		for _, rel := range []string{".", "etc", "etc/opaque", "etc/passwd", "etc/deleted", "usr-bin-sudo",
			"home/user", "home/user/private", "home/user/notes", "home/user/fifo", "home/user/sock",
			"home/user/escape", "home/relative", "sparse"} {
			var a, b unix.Stat_t
			must(t, unix.Lstat(p(rel), &a))
			if err := unix.Lstat(q(rel), &b); err != nil {
				t.Fatalf("%s not copied: %v", rel, err)
			}
			if a.Mode != b.Mode || a.Uid != b.Uid || a.Gid != b.Gid || a.Size != b.Size || a.Rdev != b.Rdev {
				t.Errorf("%s: mode %o uid %d gid %d size %d rdev %d, copy has %o %d %d %d %d",
					rel, a.Mode, a.Uid, a.Gid, a.Size, a.Rdev, b.Mode, b.Uid, b.Gid, b.Size, b.Rdev)
			}
			if a.Mtim != b.Mtim {
				t.Errorf("%s: mtime %v, copy has %v", rel, a.Mtim, b.Mtim)
			}
		}
		if _, err := os.Lstat(q("etc/null")); !os.IsNotExist(err) {
			t.Errorf("a real device node was copied: %v", err)
		}
		for rel, want := range map[string]string{"etc/passwd": "root:x:0:0\n", "home/user/notes": "notes"} {
			if b, err := os.ReadFile(q(rel)); err != nil || string(b) != want {
				t.Errorf("%s: %q, %v", rel, b, err)
			}
		}
		for rel, attr := range map[string]string{"etc/opaque": "trusted.overlay.opaque", "home/user/notes": "user.tag"} {
			b := make([]byte, 16)
			n, err := unix.Getxattr(q(rel), attr, b)
			if err != nil || n == 0 {
				t.Errorf("%s lost xattr %s: %v", rel, attr, err)
			}
		}
		if target, err := os.Readlink(q("home/user/escape")); err != nil || target != host {
			t.Errorf("the symlink out of the disk became %q, %v", target, err)
		}
		var a, b unix.Stat_t
		must(t, unix.Lstat(q("etc/passwd"), &a))
		must(t, unix.Lstat(q("home/user/passwd-link"), &b))
		if a.Ino != b.Ino {
			t.Error("hard links became separate files")
		}
		must(t, unix.Lstat(q("sparse"), &a))
		if a.Blocks*512 > 1<<20 {
			t.Errorf("the sparse file's holes were filled: %d bytes allocated", a.Blocks*512)
		}
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the copy's directory is %v, %v; want 0700", fi.Mode(), err)
	}
	if err := copyDisk(context.Background(), src, dst); err == nil {
		t.Error("a second copy into the same directory succeeded")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCopyDiskRacedBySymlinkFlips: even on a disk that changes under it (the runtimes freeze
// the box for a copy; this is the walker's own guarantee), a copy never reads through a symlink:
// while the disk's directory flips with a symlink to a host directory holding a canary, 200
// copies either fail or hold no canary.
func TestCopyDiskRacedBySymlinkFlips(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the disk copy needs root")
	}
	base := shortTempDir(t)
	host := filepath.Join(base, "data", "keys")
	must(t, os.MkdirAll(host, 0o700))
	canary := "canary-" + newID()
	must(t, os.WriteFile(filepath.Join(host, "master.key"), []byte(canary), 0o600))
	src := filepath.Join(base, "box")
	flip := filepath.Join(src, diskDir, "root")
	must(t, os.MkdirAll(filepath.Join(flip, "d.dir"), 0o755))
	must(t, os.WriteFile(filepath.Join(flip, "d.dir", "master.key"), []byte("decoy"), 0o600))
	must(t, os.Symlink(host, filepath.Join(flip, "d.lnk")))

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		d := filepath.Join(flip, "d")
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = os.Rename(d+".dir", d)
			_ = os.Rename(d, d+".dir")
			_ = os.Rename(d+".lnk", d)
			_ = os.Rename(d, d+".lnk")
		}
	}()
	defer func() { close(stop); <-done }()
	ctx := context.Background()
	failed := 0
	for i := range 200 {
		dst := filepath.Join(base, "copies", strconv.Itoa(i))
		if err := copyDisk(ctx, src, dst); err != nil {
			failed++
			continue
		}
		if p := findBytes(t, filepath.Join(dst, diskDir), canary); p != "" {
			t.Fatalf("copy %d holds the host's canary in %s", i, p)
		}
		must(t, os.RemoveAll(dst))
	}
	t.Logf("%d of 200 copies of the changing disk failed; none read through a symlink", failed)
}
