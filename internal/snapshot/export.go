package snapshot

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// PAX record keys for sparse files. Vendor-prefixed because archive/tar
// refuses to write the GNU.sparse.* keys; see the package doc.
const (
	// paxSparseRealSize is the file's apparent size in bytes.
	paxSparseRealSize = "COCOONBOX.sparse.realsize"
	// paxSparseMap lists data extents as "off,len,off,len,...", ascending
	// and non-overlapping; the entry body is their concatenation.
	paxSparseMap = "COCOONBOX.sparse.map"
	paxXattr     = "SCHILY.xattr."
	// paxDeleted marks an entry of an incremental stream that says its name is gone since the
	// base: a restore removes it (and all under it) from what the earlier layers made.
	paxDeleted = "COCOONBOX.deleted"
)

// copyBufSize is large enough to keep syscalls off the profile and small
// enough that cancellation is noticed quickly.
const copyBufSize = 1 << 20

// countWriter counts the uncompressed tar bytes for Manifest.RawBytes.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Export writes the tree under root to w as a full snapshot stream and returns
// its manifest. The tree must be quiescent (the box paused or checkpointed):
// a file whose size changes while it is read fails the export rather than
// producing a snapshot that never existed on disk.
func Export(ctx context.Context, root string, w io.Writer) (Manifest, error) {
	return ExportWith(ctx, root, w, ExportOptions{})
}

// ExportOptions make an export incremental and have it describe the tree.
type ExportOptions struct {
	// Base, when set, makes the stream incremental: only entries whose digest differs from
	// Base's are written, followed by a deletion entry for each name Base has and the tree does
	// not. Restoring it needs the layers Base was made from first (ImportChain).
	Base *Index
	// Index, when set, receives the index of the whole tree (WriteIndex's format), the base of
	// the next incremental export. It is written only when the export succeeds.
	Index io.Writer
	// Taken, with Base, is the index of the tree as a copy taken against Base saw it (an
	// Indexer's): root then holds only the entries Taken says changed since Base, and every
	// directory, so the entries written and the deletions are Taken's against Base, and Taken is
	// the index written.
	Taken *Index
}

// ExportWith is Export with options.
func ExportWith(ctx context.Context, root string, w io.Writer, opts ExportOptions) (Manifest, error) {
	m := Manifest{Version: FormatVersion, Created: time.Now().UTC()}
	if opts.Taken != nil && opts.Base == nil {
		return m, errors.New("export snapshot: a copy taken against a base is exported against that base")
	}
	st, err := os.Lstat(root)
	if err != nil {
		return m, fmt.Errorf("export snapshot: %w", err)
	}
	if !st.IsDir() {
		return m, fmt.Errorf("export snapshot: %s is not a directory", root)
	}

	ch := newCountingHash()
	zw, err := zstd.NewWriter(io.MultiWriter(w, ch), zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return m, fmt.Errorf("create zstd writer: %w", err)
	}
	cw := &countWriter{w: zw}
	tw := tar.NewWriter(cw)
	e := &exporter{ctx: ctx, tw: tw, links: map[devIno]string{}, buf: make([]byte, copyBufSize),
		base: opts.Base, index: &Index{}, taken: opts.Taken}
	if e.taken != nil {
		e.index = e.taken
	}

	walkErr := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		return e.entry(p, filepath.ToSlash(rel), &m)
	})
	if walkErr == nil && e.taken != nil {
		if want := e.taken.changedSince(e.base); e.written != want {
			walkErr = fmt.Errorf("the copy holds %d of the %d entries its index says changed", e.written, want)
		}
	}
	if walkErr == nil && opts.Base != nil {
		walkErr = e.deletions(&m)
	}
	if walkErr != nil {
		zw.Close() // release encoder goroutines; the stream is abandoned anyway
		return m, fmt.Errorf("export snapshot: %w", walkErr)
	}
	if err := tw.Close(); err != nil {
		zw.Close()
		return m, fmt.Errorf("close tar stream: %w", err)
	}
	if err := zw.Close(); err != nil {
		return m, fmt.Errorf("close zstd stream: %w", err)
	}
	m.Bytes, m.SHA256, m.RawBytes = ch.n, ch.sum(), cw.n
	if opts.Index != nil {
		if err := WriteIndex(opts.Index, e.index); err != nil {
			return m, fmt.Errorf("export snapshot: %w", err)
		}
	}
	return m, nil
}

// An Indexer digests the entries of a tree as Export does, without exporting them, so a copy
// of a box's disk taken against a base can copy only what changed (ExportOptions.Taken). Entries
// are added in Export's walk order: each directory before its entries, names in byte order.
type Indexer struct {
	e    exporter
	base *Index
}

// NewIndexer returns an Indexer telling changes from base.
func NewIndexer(base *Index) *Indexer {
	return &Indexer{e: exporter{links: map[devIno]string{}, index: &Index{}}, base: base}
}

// Add digests the entry at p (whose last name is not followed), named rel in the tree ("." for
// its root), and reports whether it differs from the base's. What Export leaves out (sockets,
// real devices) is never changed.
func (x *Indexer) Add(p, rel string) (changed bool, err error) {
	hdr, _, err := x.e.header(p, rel)
	if err != nil || hdr == nil {
		return false, err
	}
	d := headerDigest(hdr)
	x.e.index.add(rel, d)
	was, ok := x.base.digests[rel]
	return !ok || was != d, nil
}

// Index is the index of the entries added.
func (x *Indexer) Index() *Index { return x.e.index }

// deletions writes a deletion entry for each name of the base that the tree no longer has.
func (e *exporter) deletions(m *Manifest) error {
	for _, name := range e.index.gone(e.base) {
		hdr := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Format: tar.FormatPAX,
			PAXRecords: map[string]string{paxDeleted: "1"}}
		if err := e.tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write deletion %s: %w", name, err)
		}
		m.Deleted++
	}
	return nil
}

type devIno struct{ dev, ino uint64 }

type exporter struct {
	ctx   context.Context
	tw    *tar.Writer
	links map[devIno]string // first name of each multiply-linked file
	buf   []byte
	base  *Index // nil for a full export
	index *Index // of the whole tree, as walked, or Taken
	// taken is ExportOptions.Taken; written counts the entries written that it says changed.
	taken   *Index
	written int
}

func (e *exporter) entry(p, rel string, m *Manifest) error {
	hdr, sparse, err := e.header(p, rel)
	if err != nil {
		return err
	}
	if hdr == nil {
		m.Skipped++
		return nil
	}
	d := headerDigest(hdr)
	if e.taken != nil {
		// The copy's own digest may differ from the one taken (a sparse map the copy laid out
		// anew): whether it changed is what the copy was taken on.
		var ok bool
		if d, ok = e.taken.digests[rel]; !ok {
			return fmt.Errorf("%s is in the copy but not in its index", rel)
		}
	} else {
		e.index.add(rel, d)
	}
	if e.base != nil {
		if was, ok := e.base.digests[rel]; ok && was == d {
			return nil // unchanged since the base: its layers hold it
		}
	}
	if e.taken != nil {
		e.written++
	}
	if err := e.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write header %s: %w", rel, err)
	}
	if rel != "." {
		m.Files++
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	return e.copyFile(p, rel, hdr.Size, sparse)
}

// header is the tar header of the entry at p, named rel, with the data extents of a sparse
// file; a nil header for what is not box data (sockets, real devices).
func (e *exporter) header(p, rel string) (*tar.Header, []extent, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, nil, err
	}
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, nil, fmt.Errorf("stat %s: no unix stat data", p)
	}
	hdr := &tar.Header{
		Name:    rel,
		Mode:    int64(fi.Mode().Perm()),
		Uid:     int(sys.Uid),
		Gid:     int(sys.Gid),
		ModTime: fi.ModTime(),
		Format:  tar.FormatPAX,
	}
	// Keep setuid/setgid/sticky: they are part of what the user set.
	if fi.Mode()&fs.ModeSetuid != 0 {
		hdr.Mode |= 0o4000
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		hdr.Mode |= 0o2000
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		hdr.Mode |= 0o1000
	}

	var sparse []extent
	switch mode := fi.Mode(); {
	case mode.IsDir():
		hdr.Typeflag = tar.TypeDir
		if rel != "." {
			hdr.Name += "/"
		}
	case mode.IsRegular():
		hdr.Typeflag = tar.TypeReg
		if sys.Nlink > 1 {
			key := devIno{uint64(sys.Dev), sys.Ino}
			if first, seen := e.links[key]; seen {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				break
			}
			e.links[key] = rel
		}
		hdr.Size = fi.Size()
		// Only ask for extents when fewer blocks are allocated than the
		// size needs; dense files are the common case and skip the seeks.
		if sys.Blocks*512 < fi.Size() {
			sparse, err = dataExtents(p, fi.Size())
			if err != nil {
				return nil, nil, err
			}
		}
	case mode&fs.ModeSymlink != 0:
		hdr.Typeflag = tar.TypeSymlink
		if hdr.Linkname, err = os.Readlink(p); err != nil {
			return nil, nil, err
		}
	case mode&fs.ModeNamedPipe != 0:
		hdr.Typeflag = tar.TypeFifo
	case mode&fs.ModeCharDevice != 0 && sys.Rdev == 0:
		// An overlayfs whiteout: it records a deletion in the lower layer
		// and must survive, or deleted files reappear on restore.
		hdr.Typeflag = tar.TypeChar
	default:
		// Real devices and sockets are not box data.
		return nil, nil, nil
	}

	if hdr.Typeflag != tar.TypeSymlink && hdr.Typeflag != tar.TypeLink {
		if err := readXattrs(p, hdr); err != nil {
			return nil, nil, err
		}
	}
	if sparse != nil {
		var b strings.Builder
		var data int64
		for i, x := range sparse {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(x.off, 10))
			b.WriteByte(',')
			b.WriteString(strconv.FormatInt(x.len, 10))
			data += x.len
		}
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords[paxSparseRealSize] = strconv.FormatInt(hdr.Size, 10)
		// An empty PAX value means "unset", so a file of holes only gets
		// an explicit empty extent.
		if b.Len() == 0 {
			b.WriteString("0,0")
		}
		hdr.PAXRecords[paxSparseMap] = b.String()
		hdr.Size = data
	}

	return hdr, sparse, nil
}

func (e *exporter) copyFile(p, rel string, size int64, sparse []extent) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	src := &ctxReader{ctx: e.ctx, r: f}
	if sparse == nil {
		n, err := io.CopyBuffer(e.tw, io.LimitReader(src, size), e.buf)
		if err != nil {
			return fmt.Errorf("copy %s: %w", rel, err)
		}
		if n != size {
			return fmt.Errorf("copy %s: file shrank during export (%d of %d bytes)", rel, n, size)
		}
		return nil
	}
	for _, x := range sparse {
		n, err := io.CopyBuffer(e.tw, io.NewSectionReader(f, x.off, x.len), e.buf)
		if err != nil {
			return fmt.Errorf("copy %s: %w", rel, err)
		}
		if n != x.len {
			return fmt.Errorf("copy %s: file shrank during export", rel)
		}
	}
	return nil
}

type extent struct{ off, len int64 }

// dataExtents lists the data regions of a file with SEEK_DATA/SEEK_HOLE. It
// returns nil (meaning "copy densely") when the filesystem cannot say.
func dataExtents(p string, size int64) ([]extent, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fd := int(f.Fd())
	xs := []extent{}
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole remains
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("seek data in %s: %w", p, err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("seek hole in %s: %w", p, err)
		}
		if hole > size {
			hole = size
		}
		if hole > data {
			xs = append(xs, extent{data, hole - data})
		}
		off = hole
	}
	return xs, nil
}

// readXattrs copies a file's extended attributes into PAX records.
func readXattrs(p string, hdr *tar.Header) error {
	names, err := boxXattrs(p)
	if err != nil {
		return err
	}
	for _, name := range names {
		val, err := getXattr(p, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed between list and get
		}
		if err != nil {
			return fmt.Errorf("read xattr %s of %s: %w", name, p, err)
		}
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords[paxXattr+name] = string(val)
	}
	return nil
}

// boxXattrs lists the extended attributes of p that are the box's: all but security.selinux,
// whose labels belong to the host's policy.
func boxXattrs(p string) ([]string, error) {
	names, err := listXattrs(p)
	return slices.DeleteFunc(names, func(n string) bool { return n == "security.selinux" }), err
}

func listXattrs(p string) ([]string, error) {
	sz, err := unix.Llistxattr(p, nil)
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list xattrs of %s: %w", p, err)
	}
	if sz == 0 {
		return nil, nil
	}
	buf := make([]byte, sz)
	sz, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil, fmt.Errorf("list xattrs of %s: %w", p, err)
	}
	var names []string
	for _, n := range strings.Split(string(buf[:sz]), "\x00") {
		if n != "" {
			names = append(names, n)
		}
	}
	return names, nil
}

func getXattr(p, name string) ([]byte, error) {
	sz, err := unix.Lgetxattr(p, name, nil)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, sz)
	sz, err = unix.Lgetxattr(p, name, buf)
	if err != nil {
		return nil, err
	}
	return buf[:sz], nil
}
