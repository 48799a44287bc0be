package runtime

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/loomhand/cocoonbox/internal/snapshot"
)

// A box's disk is written by the box: any name in it may be a symlink, or become one while a
// host walker is between a check and a use. copyTree therefore never resolves a path of more
// than one component and never follows a symlink: every entry is opened relative to its
// parent's file descriptor with openat2 and RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH|RESOLVE_NO_XDEV,
// and what was opened is checked to be what was listed. It keeps what an overlay upper layer is
// made of and what cp -a kept: whiteouts (0:0 character devices), trusted.overlay.* and other
// xattrs, owners, modes with setuid bits, times, hard links, symlinks, fifos, sockets and holes,
// and reflinks where the filesystem can. Real device nodes are not box data and are left out.

// resolveStrict is how every path is resolved: one name, beneath its directory, no symlink,
// no mount crossing.
const resolveStrict = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS

// maxTreeDepth bounds recursion (and so open descriptors): a box can nest directories deeper than
// any real tree.
const maxTreeDepth = 1024

type inode struct{ dev, ino uint64 }

// linked is where the first copy of a multiply-linked file went: its parent (relative to the
// destination's root) and its name.
type linked struct{ dir, name string }

// treeCopier copies one tree; it is not safe for concurrent use.
type treeCopier struct {
	dstRoot int
	links   map[inode]linked
	buf     []byte
	skipped int // real device nodes left out
	// since, when set, has the copy leave out what did not change since its base (see
	// copyTreeSince); srcPath is the source's path, which it reads.
	since   *snapshot.Indexer
	srcPath string
}

// copyTree copies the contents and metadata of the directory src into the empty directory dst
// (both open descriptors).
func copyTree(src, dst int) (skipped int, err error) {
	c := &treeCopier{dstRoot: dst, links: map[inode]linked{}, buf: make([]byte, 1<<20)}
	return c.tree(src, dst)
}

// copyTreeSince is copyTree leaving out every entry whose snapshot digest equals base's, but
// directories and files of several links, and returns the index of the whole source: a copy
// for an incremental export (snapshot.ExportOptions.Taken), which pauses a box for what changed
// rather than for its whole disk. srcPath is src's path; the digests read the entries by path
// (as an export does), which is why the copier runs confined with the box paused: a path there
// reaches only the source and the copy, and the digest decides only what is copied.
func copyTreeSince(src, dst int, srcPath string, base *snapshot.Index) (*snapshot.Index, error) {
	c := &treeCopier{dstRoot: dst, links: map[inode]linked{}, buf: make([]byte, 1<<20),
		since: snapshot.NewIndexer(base), srcPath: srcPath}
	if _, err := c.since.Add(srcPath, "."); err != nil {
		return nil, fmt.Errorf("index the disk: %w", err)
	}
	if _, err := c.tree(src, dst); err != nil {
		return nil, err
	}
	return c.since.Index(), nil
}

func (c *treeCopier) tree(src, dst int) (skipped int, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return 0, fmt.Errorf("stat source: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, errors.New("source is not a directory")
	}
	if err := c.dir(src, dst, ".", 0); err != nil {
		return c.skipped, err
	}
	if err := c.meta(src, dst, dst, ".", &st); err != nil {
		return c.skipped, err
	}
	return c.skipped, nil
}

func openStrict(dir int, name string, flags uint64, mode uint64) (int, error) {
	how := unix.OpenHow{Flags: flags | unix.O_NOFOLLOW | unix.O_CLOEXEC, Mode: mode, Resolve: resolveStrict}
	for {
		fd, err := unix.Openat2(dir, name, &how)
		if !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) {
			return fd, err
		}
	}
}

// dir copies the entries of the open directory src into dst; rel names it for messages and
// hard links.
func (c *treeCopier) dir(src, dst int, rel string, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("copy %s: deeper than %d directories", rel, maxTreeDepth)
	}
	names, err := readNames(src)
	if err != nil {
		return fmt.Errorf("list %s: %w", rel, err)
	}
	slices.Sort(names) // an export's walk order, which the digests of hard links follow
	for _, name := range names {
		if err := c.entry(src, dst, rel, name, depth); err != nil {
			return err
		}
	}
	return nil
}

// readNames lists a directory through a duplicate of its descriptor, so src stays open and
// positioned for the caller.
func readNames(dir int) ([]string, error) {
	fd, err := unix.Dup(dir)
	if err != nil {
		return nil, err
	}
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "dir")
	defer func() { _ = f.Close() }()
	return f.Readdirnames(-1)
}

func join(rel, name string) string {
	if rel == "." {
		return name
	}
	return rel + "/" + name
}

func (c *treeCopier) entry(src, dst int, rel, name string, depth int) error {
	path := join(rel, name)
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("copy %s: bad name %q", rel, name)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	kind := st.Mode & unix.S_IFMT
	if c.since != nil {
		changed, err := c.since.Add(c.srcPath+"/"+path, path)
		if err != nil {
			return fmt.Errorf("index %s: %w", path, err)
		}
		// Directories hold what changed; every link of a file is copied, so an export finds
		// the first name a later one links to.
		if !changed && kind != unix.S_IFDIR && st.Nlink <= 1 {
			return nil
		}
	}
	if kind != unix.S_IFDIR && st.Nlink > 1 {
		key := inode{st.Dev, st.Ino}
		if first, ok := c.links[key]; ok {
			return c.hardLink(first, dst, name, path)
		}
		c.links[key] = linked{dir: rel, name: name}
	}
	switch kind {
	case unix.S_IFDIR:
		in, err := c.openSame(src, name, path, unix.O_RDONLY|unix.O_DIRECTORY, &st)
		if err != nil {
			return err
		}
		defer func() { _ = unix.Close(in) }()
		if err := unix.Mkdirat(dst, name, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
		out, err := openStrict(dst, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return fmt.Errorf("open copy of %s: %w", path, err)
		}
		defer func() { _ = unix.Close(out) }()
		if err := c.dir(in, out, path, depth+1); err != nil {
			return err
		}
		return c.meta(in, out, dst, name, &st)
	case unix.S_IFREG:
		in, err := c.openSame(src, name, path, unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK, &st)
		if err != nil {
			return err
		}
		defer func() { _ = unix.Close(in) }()
		out, err := openStrict(dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
		defer func() { _ = unix.Close(out) }()
		if err := c.data(in, out, st.Size); err != nil {
			return fmt.Errorf("copy %s: %w", path, err)
		}
		return c.meta(in, out, dst, name, &st)
	case unix.S_IFLNK:
		target, err := readlinkat(src, name)
		if err != nil {
			return fmt.Errorf("read link %s: %w", path, err)
		}
		if err := unix.Symlinkat(target, dst, name); err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
		return c.meta(-1, -1, dst, name, &st)
	case unix.S_IFCHR, unix.S_IFBLK:
		if st.Rdev != 0 || kind == unix.S_IFBLK {
			c.skipped++
			return nil
		}
		fallthrough // a whiteout
	case unix.S_IFIFO, unix.S_IFSOCK:
		if err := unix.Mknodat(dst, name, kind|0o600, 0); err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
		return c.meta(-1, -1, dst, name, &st)
	}
	return fmt.Errorf("copy %s: unknown file type %#o", path, kind)
}

// openSame opens name in dir and checks it is the inode that was listed, so a swap between the
// stat and the open fails the copy instead of copying something else.
func (c *treeCopier) openSame(dir int, name, path string, flags int, want *unix.Stat_t) (int, error) {
	fd, err := openStrict(dir, name, uint64(flags), 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Dev != want.Dev || st.Ino != want.Ino ||
		st.Mode&unix.S_IFMT != want.Mode&unix.S_IFMT {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("open %s: it changed during the copy", path)
	}
	return fd, nil
}

// hardLink links name in dst to the first copy of the same inode.
func (c *treeCopier) hardLink(first linked, dst int, name, path string) error {
	dir := c.dstRoot
	if first.dir != "." {
		fd, err := openStrict(c.dstRoot, first.dir, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return fmt.Errorf("link %s: %w", path, err)
		}
		defer func() { _ = unix.Close(fd) }()
		dir = fd
	}
	if err := unix.Linkat(dir, first.name, dst, name, 0); err != nil {
		return fmt.Errorf("link %s to %s: %w", path, join(first.dir, first.name), err)
	}
	return nil
}

// meta gives the copy name in dir (out, when open) the source's owner, mode, xattrs (from in,
// when open, else by name) and times, in that order: a chown clears setuid bits and file
// capabilities, and every change but the times' moves the change time only.
func (c *treeCopier) meta(in, out, dir int, name string, st *unix.Stat_t) error {
	kind := st.Mode & unix.S_IFMT
	if err := unix.Fchownat(dir, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown copy of %s: %w", name, err)
	}
	if kind != unix.S_IFLNK {
		if err := unix.Fchmodat(dir, name, st.Mode&0o7777, 0); err != nil {
			return fmt.Errorf("chmod copy of %s: %w", name, err)
		}
	}
	if err := copyXattrs(in, out, dir, name); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(dir, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of copy of %s: %w", name, err)
	}
	return nil
}

// data copies size bytes of in to out: a reflink where the filesystem can, else the data
// extents only (holes stay holes), by copy_file_range or, failing that, read and write.
func (c *treeCopier) data(in, out int, size int64) error {
	if size == 0 {
		return nil
	}
	if unix.IoctlFileClone(out, in) == nil {
		return nil
	}
	for off := int64(0); off < size; {
		start, err := unix.Seek(in, off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO):
			start = size // only a hole remains
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP):
			start = off // the filesystem cannot say: copy densely
		case err != nil:
			return fmt.Errorf("seek data: %w", err)
		}
		if start >= size {
			break
		}
		end, err := unix.Seek(in, start, unix.SEEK_HOLE)
		if err != nil || end > size {
			end = size
		}
		if err := c.extent(in, out, start, end-start); err != nil {
			return err
		}
		off = end
	}
	return unix.Ftruncate(out, size)
}

func (c *treeCopier) extent(in, out int, off, n int64) error {
	for n > 0 {
		ro, wo := off, off
		k, err := unix.CopyFileRange(in, &ro, out, &wo, int(min(n, 1<<30)), 0)
		if err != nil || k == 0 {
			return c.extentRW(in, out, off, n)
		}
		off += int64(k)
		n -= int64(k)
	}
	return nil
}

func (c *treeCopier) extentRW(in, out int, off, n int64) error {
	for n > 0 {
		k, err := unix.Pread(in, c.buf[:min(n, int64(len(c.buf)))], off)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if k == 0 {
			return errors.New("file shrank during the copy")
		}
		if _, err := unix.Pwrite(out, c.buf[:k], off); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		off += int64(k)
		n -= int64(k)
	}
	return nil
}

func readlinkat(dir int, name string) (string, error) {
	for size := 256; size <= 1<<16; size *= 4 {
		b := make([]byte, size)
		n, err := unix.Readlinkat(dir, name, b)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(b[:n]), nil
		}
	}
	return "", errors.New("link target too long")
}

// copyXattrs copies every extended attribute but security.selinux (the host labels its own
// files). Open files go through their descriptors; symlinks and special files by name relative
// to their directory with the *xattrat calls (Linux 6.13), and without xattrs on older kernels,
// where overlayfs does not put any on them either.
func copyXattrs(in, out, dir int, name string) error {
	list, err := listXattrs(in, dir, name)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list xattrs of %s: %w", name, err)
	}
	for _, attr := range list {
		if attr == "security.selinux" {
			continue
		}
		val, err := getXattr(in, dir, name, attr)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read xattr %s of %s: %w", attr, name, err)
		}
		if err := setXattr(out, dir, name, attr, val); err != nil {
			return fmt.Errorf("write xattr %s of %s: %w", attr, name, err)
		}
	}
	return nil
}

// The xattrat calls take their value in this struct.
type xattrArgs struct {
	value uint64
	size  uint32
	flags uint32
}

func listXattrs(fd, dir int, name string) ([]string, error) {
	list := func(b []byte) (int, error) {
		if fd >= 0 {
			return unix.Flistxattr(fd, b)
		}
		return listxattrat(dir, name, b)
	}
	for range 4 {
		n, err := list(nil)
		if err != nil || n == 0 {
			return nil, err
		}
		b := make([]byte, n)
		n, err = list(b)
		if errors.Is(err, unix.ERANGE) {
			continue // grew between the calls
		}
		if err != nil {
			return nil, err
		}
		var names []string
		for _, s := range strings.Split(string(b[:n]), "\x00") {
			if s != "" {
				names = append(names, s)
			}
		}
		return names, nil
	}
	return nil, unix.ERANGE
}

func getXattr(fd, dir int, name, attr string) ([]byte, error) {
	get := func(b []byte) (int, error) {
		if fd >= 0 {
			return unix.Fgetxattr(fd, attr, b)
		}
		return getxattrat(dir, name, attr, b)
	}
	for range 4 {
		n, err := get(nil)
		if err != nil {
			return nil, err
		}
		b := make([]byte, n)
		n, err = get(b)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		return b[:n], err
	}
	return nil, unix.ERANGE
}

func setXattr(fd, dir int, name, attr string, val []byte) error {
	if fd >= 0 {
		return unix.Fsetxattr(fd, attr, val, 0)
	}
	return setxattrat(dir, name, attr, val)
}

func listxattrat(dir int, name string, b []byte) (int, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return 0, err
	}
	var buf unsafe.Pointer
	if len(b) > 0 {
		buf = unsafe.Pointer(&b[0])
	}
	n, _, e := unix.Syscall6(unix.SYS_LISTXATTRAT, uintptr(dir), uintptr(unsafe.Pointer(p)),
		unix.AT_SYMLINK_NOFOLLOW, uintptr(buf), uintptr(len(b)), 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func getxattrat(dir int, name, attr string, b []byte) (int, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return 0, err
	}
	a, err := unix.BytePtrFromString(attr)
	if err != nil {
		return 0, err
	}
	args := xattrArgs{size: uint32(len(b))}
	if len(b) > 0 {
		args.value = uint64(uintptr(unsafe.Pointer(&b[0])))
	}
	n, _, e := unix.Syscall6(unix.SYS_GETXATTRAT, uintptr(dir), uintptr(unsafe.Pointer(p)),
		unix.AT_SYMLINK_NOFOLLOW, uintptr(unsafe.Pointer(a)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func setxattrat(dir int, name, attr string, val []byte) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	a, err := unix.BytePtrFromString(attr)
	if err != nil {
		return err
	}
	args := xattrArgs{size: uint32(len(val))}
	if len(val) > 0 {
		args.value = uint64(uintptr(unsafe.Pointer(&val[0])))
	}
	_, _, e := unix.Syscall6(unix.SYS_SETXATTRAT, uintptr(dir), uintptr(unsafe.Pointer(p)),
		unix.AT_SYMLINK_NOFOLLOW, uintptr(unsafe.Pointer(a)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
	if e != 0 {
		return e
	}
	return nil
}
