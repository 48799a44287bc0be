package runtime

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/loomhand/cocoonbox/internal/snapshot"
)

// TestCopyDiskSince: a copy taken against the index of an earlier export holds what changed
// since (not a large file that did not), its index is the one a full copy's export writes, and
// its export against that base, restored over the earlier export, makes the disk as it is now:
// changed and new files, a deleted file and tree, metadata, xattrs, a whiteout and a new hard
// link to a file that did not change.
func TestCopyDiskSince(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the disk copy needs root (owners, whiteouts, trusted xattrs, namespaces)")
	}
	ctx := context.Background()
	base := shortTempDir(t)
	src := filepath.Join(base, "box")
	disk := filepath.Join(src, diskDir)
	p := func(rel string) string { return filepath.Join(disk, rel) }
	must(t, os.MkdirAll(p("home/user/gone/deep"), 0o755))
	must(t, os.MkdirAll(p("etc"), 0o755))
	big := bytes.Repeat([]byte("unchanged "), 800_000)
	must(t, os.WriteFile(p("home/user/big.bin"), big, 0o644))
	must(t, os.WriteFile(p("home/user/notes"), []byte("notes v1"), 0o640))
	must(t, os.WriteFile(p("home/user/gone/deep/file"), []byte("x"), 0o644))
	must(t, os.WriteFile(p("home/user/deleted"), []byte("soon gone"), 0o644))
	must(t, os.WriteFile(p("etc/conf"), []byte("a=1"), 0o644))
	must(t, os.Symlink("../etc/conf", p("home/conf-link")))
	old := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	must(t, os.Chtimes(p("home/user/big.bin"), old, old))

	// The earlier export, as a full snapshot makes it: a copy, exported whole with its index.
	first := filepath.Join(base, "first")
	must(t, copyDisk(ctx, src, first))
	var s0, idx0 bytes.Buffer
	m0, err := snapshot.ExportWith(ctx, filepath.Join(first, diskDir), &s0, snapshot.ExportOptions{Index: &idx0})
	must(t, err)

	must(t, os.WriteFile(p("home/user/notes"), []byte("notes v2, longer"), 0o640))
	must(t, os.WriteFile(p("home/user/new"), []byte("new file"), 0o600))
	must(t, os.Chown(p("home/user/new"), 1000, 1000))
	must(t, os.Remove(p("home/user/deleted")))
	must(t, os.RemoveAll(p("home/user/gone")))
	must(t, os.Chmod(p("etc/conf"), 0o600))
	must(t, unix.Setxattr(p("etc"), "trusted.overlay.opaque", []byte("y"), 0))
	must(t, unix.Mknod(p("etc/whiteout"), unix.S_IFCHR|0o600, 0))
	must(t, os.Link(p("home/user/big.bin"), p("home/user/link-to-big")))

	since := filepath.Join(base, "since")
	must(t, copyDiskSince(ctx, src, since, idx0.Bytes()))
	for _, rel := range []string{"home/user/notes", "home/user/new", "etc/conf", "etc/whiteout"} {
		if _, err := os.Lstat(filepath.Join(since, diskDir, rel)); err != nil {
			t.Errorf("the copy since lacks %s, which changed: %v", rel, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(since, diskDir, "home/conf-link")); err == nil {
		t.Error("the copy since holds a symlink that did not change")
	}
	f, err := os.Open(filepath.Join(since, DiskIndexFile))
	must(t, err)
	taken, err := snapshot.ReadIndex(f, 0)
	_ = f.Close()
	must(t, err)
	base0, err := snapshot.ReadIndex(bytes.NewReader(idx0.Bytes()), 0)
	must(t, err)

	// What an export of a whole copy against the same base writes, to compare with.
	whole := filepath.Join(base, "whole")
	must(t, copyDisk(ctx, src, whole))
	var wantStream, wantIdx bytes.Buffer
	want, err := snapshot.ExportWith(ctx, filepath.Join(whole, diskDir), &wantStream,
		snapshot.ExportOptions{Base: base0, Index: &wantIdx})
	must(t, err)

	var s1, idx1 bytes.Buffer
	m1, err := snapshot.ExportWith(ctx, filepath.Join(since, diskDir), &s1,
		snapshot.ExportOptions{Base: base0, Taken: taken, Index: &idx1})
	must(t, err)
	if m1.Files != want.Files || m1.Deleted != want.Deleted {
		t.Errorf("the export of the copy since holds %d entries and %d deletions, of a whole copy %d and %d",
			m1.Files, m1.Deleted, want.Files, want.Deleted)
	}
	if !bytes.Equal(idx1.Bytes(), wantIdx.Bytes()) {
		t.Error("the index of the copy since is not the one a whole copy's export writes")
	}
	if m1.RawBytes > int64(len(big))/4 {
		t.Errorf("the incremental stream holds %d bytes: the unchanged file went in", m1.RawBytes)
	}

	restored := filepath.Join(base, "restored")
	_, err = snapshot.ImportChain(ctx, []snapshot.Layer{{R: &s0, Want: m0}, {R: &s1, Want: m1}}, restored, snapshot.Limits{})
	must(t, err)
	sameTree(t, filepath.Join(whole, diskDir), restored)

	// An export of the copy against any other base is refused, not made up.
	if _, err := snapshot.ExportWith(ctx, filepath.Join(since, diskDir), &bytes.Buffer{},
		snapshot.ExportOptions{Taken: taken}); err == nil {
		t.Error("a copy taken against a base was exported whole")
	}
}

// sameTree fails t unless got has the names, kinds, modes, owners, times, link targets and
// contents of want.
func sameTree(t *testing.T, want, got string) {
	t.Helper()
	seen := map[string]bool{}
	must(t, filepath.WalkDir(want, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(want, path)
		seen[rel] = true
		var a, b unix.Stat_t
		must(t, unix.Lstat(path, &a))
		if err := unix.Lstat(filepath.Join(got, rel), &b); err != nil {
			t.Errorf("%s missing after restore: %v", rel, err)
			return nil
		}
		if a.Mode != b.Mode || a.Uid != b.Uid || a.Gid != b.Gid || a.Size != b.Size || (a.Mode&unix.S_IFMT != unix.S_IFDIR && a.Nlink != b.Nlink) {
			t.Errorf("%s: mode %o uid %d gid %d size %d links %d, restored %o %d %d %d %d",
				rel, a.Mode, a.Uid, a.Gid, a.Size, a.Nlink, b.Mode, b.Uid, b.Gid, b.Size, b.Nlink)
		}
		if a.Mtim != b.Mtim && a.Mode&unix.S_IFMT != unix.S_IFLNK {
			t.Errorf("%s: mtime %v, restored %v", rel, a.Mtim, b.Mtim)
		}
		switch a.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			x, _ := os.ReadFile(path)
			y, _ := os.ReadFile(filepath.Join(got, rel))
			if !bytes.Equal(x, y) {
				t.Errorf("%s: contents differ after restore", rel)
			}
		case unix.S_IFLNK:
			x, _ := os.Readlink(path)
			y, _ := os.Readlink(filepath.Join(got, rel))
			if x != y {
				t.Errorf("%s: links to %q, restored to %q", rel, x, y)
			}
		}
		return nil
	}))
	must(t, filepath.WalkDir(got, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(got, path); !seen[rel] {
			t.Errorf("%s is in the restored tree only", rel)
		}
		return nil
	}))
}
