package snapshot

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// ErrUnsafePath is wrapped by errors for entries that would land outside the
// target directory: absolute names, ".." components, or paths through a
// symlink created by the same stream.
var ErrUnsafePath = errors.New("unsafe path in snapshot")

// ErrLimit is wrapped by errors for streams over one of the import's Limits;
// the message names the limit.
var ErrLimit = errors.New("snapshot over the import limit")

// Default import limits: far above what a box's disk holds, low enough that a
// stream built to fill the host (a small zstd frame that inflates without end,
// millions of empty files) is cut off.
const (
	DefaultMaxBytes   = 64 << 30 // decompressed tar bytes
	DefaultMaxEntries = 4 << 20  // tar entries, directories included
)

// Limits bound what one import may write. A snapshot stream comes from a box,
// or from S3 where a box's stream was stored, so its size is the box's to
// choose. Zero fields take the defaults.
type Limits struct {
	// MaxBytes bounds the decompressed tar stream: headers, file data and padding.
	MaxBytes int64
	// MaxEntries bounds the number of tar entries.
	MaxEntries int
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	return l
}

// Import is ImportLimits with the default limits.
func Import(ctx context.Context, r io.Reader, root string, want Manifest) (Manifest, error) {
	return ImportLimits(ctx, r, root, want, Limits{})
}

// ImportLimits extracts the snapshot stream r into root, which must be absent
// or an empty directory, and verifies the stream against want.SHA256 (and
// want.Bytes, when set). It returns the manifest of the stream as read, with
// want's identity fields copied. A stream over lim fails with ErrLimit.
//
// A checksum mismatch is only known once the whole stream has been read, so
// ImportLimits extracts into a temporary directory beside root and renames it
// into place only after verification: on any error root is left as it was.
func ImportLimits(ctx context.Context, r io.Reader, root string, want Manifest, lim Limits) (Manifest, error) {
	return ImportChain(ctx, []Layer{{R: r, Want: want}}, root, lim)
}

// A Layer is one stream of a chain: the first a full snapshot, each later one an incremental
// stream exported against the tree the layers before it make.
type Layer struct {
	R    io.Reader
	Want Manifest
}

// ImportChain extracts layers in order into root, as ImportLimits does one: each is verified
// against its manifest, lim bounds the chain as a whole, and root appears only once every layer
// is in and verified. It returns the manifest of the last layer as read.
func ImportChain(ctx context.Context, layers []Layer, root string, lim Limits) (Manifest, error) {
	lim = lim.withDefaults()
	if len(layers) == 0 {
		return Manifest{}, fmt.Errorf("import snapshot: no layers")
	}
	for _, l := range layers {
		if l.Want.SHA256 == "" {
			return Manifest{}, fmt.Errorf("import snapshot%s: manifest has no sha256", idSuffix(l.Want))
		}
		if l.Want.Version != 0 && l.Want.Version != FormatVersion {
			return Manifest{}, fmt.Errorf("import snapshot%s: unsupported format version %d", idSuffix(l.Want), l.Want.Version)
		}
	}
	root = filepath.Clean(root)
	if err := checkEmptyTarget(root); err != nil {
		return Manifest{}, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(root), "."+filepath.Base(root)+".import-")
	if err != nil {
		return Manifest{}, fmt.Errorf("create import directory: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	im := &importer{ctx: ctx, dir: tmp, symlinks: map[string]bool{}, dirs: map[string]dirMeta{},
		buf: make([]byte, copyBufSize), maxEntries: lim.MaxEntries}
	var got Manifest
	left := lim.MaxBytes
	for i, l := range layers {
		im.layer = i
		if got, err = im.importLayer(l.R, l.Want, left); err != nil {
			return got, err
		}
		left -= got.RawBytes
	}
	if err := im.finish(); err != nil {
		return got, fmt.Errorf("import snapshot: %w", err)
	}
	// The target was checked empty; remove the empty dir so rename works.
	if err := os.Remove(root); err != nil && !errors.Is(err, os.ErrNotExist) {
		return got, fmt.Errorf("replace empty target %s: %w", root, err)
	}
	if err := os.Rename(tmp, root); err != nil {
		return got, fmt.Errorf("move snapshot into place: %w", err)
	}
	ok = true
	return got, nil
}

// importLayer extracts one stream into the importer's directory and verifies it; maxBytes is
// what the chain's limit leaves for it.
func (im *importer) importLayer(r io.Reader, want Manifest, maxBytes int64) (Manifest, error) {
	got := Manifest{Version: FormatVersion, SnapshotID: want.SnapshotID, BoxID: want.BoxID,
		ParentID: want.ParentID, BaseID: want.BaseID, Created: want.Created}
	ch := newCountingHash()
	raw := io.TeeReader(&ctxReader{ctx: im.ctx, r: r}, ch)
	// Concurrency 1 makes the decoder synchronous: no read-ahead goroutine
	// holds raw, so after a decode error it is safe to drain raw here.
	zr, err := zstd.NewReader(raw, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return got, fmt.Errorf("create zstd reader: %w", err)
	}
	defer zr.Close()
	cr := &countReader{r: zr, max: maxBytes}
	im.localErr = false

	exErr := im.extract(tar.NewReader(cr), &got)
	if exErr == nil {
		// Read to the end so the zstd frame checksum and the sha256 cover
		// every byte, including tar padding and anything after it.
		if _, err := io.Copy(io.Discard, cr); err != nil {
			exErr = fmt.Errorf("read snapshot tail: %w", err)
		}
	}
	if exErr != nil {
		// A corrupted stream usually breaks the decoder before the end.
		// Name the checksum if we can: it is the error that explains it.
		if im.ctx.Err() == nil && !im.localErr && !errors.Is(exErr, ErrLimit) {
			if _, err := io.Copy(io.Discard, raw); err == nil {
				if cerr := ch.check(want); cerr != nil {
					return got, fmt.Errorf("import snapshot: %w (decoding failed: %v)", cerr, exErr)
				}
			}
		}
		return got, fmt.Errorf("import snapshot%s: %w", idSuffix(want), exErr)
	}
	if err := ch.check(want); err != nil {
		return got, fmt.Errorf("import snapshot: %w", err)
	}
	got.Bytes, got.SHA256, got.RawBytes = ch.n, ch.sum(), cr.n
	return got, nil
}

func checkEmptyTarget(root string) error {
	f, err := os.Open(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open import target: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat import target: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("import snapshot: target %s is not a directory", root)
	}
	if names, _ := f.Readdirnames(1); len(names) > 0 {
		return fmt.Errorf("import snapshot: target %s is not empty", root)
	}
	return nil
}

// countReader counts the decompressed stream and fails once it passes max.
type countReader struct {
	r   io.Reader
	n   int64
	max int64
}

func (c *countReader) Read(p []byte) (int, error) {
	if rest := c.max + 1 - c.n; int64(len(p)) > rest {
		p = p[:rest] // read one byte past max at most, to tell "at" from "over"
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return n, fmt.Errorf("%w: the stream holds more than %d bytes", ErrLimit, c.max)
	}
	return n, err
}

type dirMeta struct {
	path  string
	hdr   *tar.Header
	mtime time.Time
}

type importer struct {
	ctx      context.Context
	dir      string
	symlinks map[string]bool    // relative names of the symlinks in the tree
	dirs     map[string]dirMeta // by relative name; metadata applied last, children change mtimes
	buf      []byte
	// layer is the index of the stream being extracted: above 0 it is incremental, and its
	// entries replace or delete what the earlier layers made.
	layer int
	// localErr marks a failure of the local filesystem rather than of the
	// stream, where draining the input to name a checksum would be wrong.
	localErr   bool
	entries    int
	maxEntries int
}

func (im *importer) extract(tr *tar.Reader, m *Manifest) error {
	for {
		if err := im.ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read tar header: %w", err)
		}
		if im.entries++; im.entries > im.maxEntries {
			return fmt.Errorf("%w: the stream holds more than %d entries", ErrLimit, im.maxEntries)
		}
		rel, err := im.safeName(hdr.Name)
		if err != nil {
			return err
		}
		if _, ok := hdr.PAXRecords[paxDeleted]; ok {
			if err := im.delete(rel); err != nil {
				return err
			}
			m.Deleted++
			continue
		}
		if rel != "." {
			m.Files++
		}
		if im.layer > 0 {
			if err := im.replace(hdr, rel); err != nil {
				return err
			}
		}
		if err := im.create(tr, hdr, rel); err != nil {
			return err
		}
	}
}

// safeName validates an entry name and returns it cleaned. Beyond rejecting
// ".." and absolute names it refuses any path whose parent is a symlink this
// stream created: following it could write outside the tree, and Export
// never produces such a path.
func (im *importer) safeName(name string) (string, error) {
	if name == "" || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%w: %q", ErrUnsafePath, name)
	}
	if path.IsAbs(name) || filepath.IsAbs(name) {
		return "", fmt.Errorf("%w: absolute name %q", ErrUnsafePath, name)
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", fmt.Errorf("%w: %q contains ..", ErrUnsafePath, name)
		}
	}
	rel := path.Clean(name)
	for p := path.Dir(rel); p != "." && p != "/"; p = path.Dir(p) {
		if im.symlinks[p] {
			return "", fmt.Errorf("%w: %q is under symlink %q", ErrUnsafePath, name, p)
		}
	}
	return rel, nil
}

// delete removes rel and everything under it, for a deletion entry of an incremental layer.
func (im *importer) delete(rel string) error {
	if im.layer == 0 || rel == "." {
		return fmt.Errorf("import snapshot: deletion of %q in a full snapshot", rel)
	}
	p := filepath.Join(im.dir, filepath.FromSlash(rel))
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return nil // already gone with a directory the layer replaced
	}
	return im.remove(p, rel)
}

// replace clears the way for an incremental layer's entry: what an earlier layer made at rel is
// removed, unless both are directories, whose metadata the entry then updates in place.
func (im *importer) replace(hdr *tar.Header, rel string) error {
	p := filepath.Join(im.dir, filepath.FromSlash(rel))
	st, err := os.Lstat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		im.localErr = true
		return fmt.Errorf("replace %s: %w", rel, err)
	case st.IsDir() && hdr.Typeflag == tar.TypeDir:
		if err := clearXattrs(p); err != nil {
			im.localErr = true
			return fmt.Errorf("replace %s: %w", rel, err)
		}
		return nil
	case rel == ".":
		return fmt.Errorf("import snapshot: the root is not a directory")
	}
	return im.remove(p, rel)
}

// remove deletes p (named rel) and what is under it, and forgets the symlinks and directories
// that were there. Its parents were checked by safeName, so no symlink is followed.
func (im *importer) remove(p, rel string) error {
	if err := os.RemoveAll(p); err != nil {
		im.localErr = true
		return fmt.Errorf("remove %s: %w", rel, err)
	}
	delete(im.symlinks, rel)
	prefix := rel + "/"
	for name := range im.symlinks {
		if strings.HasPrefix(name, prefix) {
			delete(im.symlinks, name)
		}
	}
	delete(im.dirs, rel)
	for name := range im.dirs {
		if strings.HasPrefix(name, prefix) {
			delete(im.dirs, name)
		}
	}
	return nil
}

func (im *importer) create(tr *tar.Reader, hdr *tar.Header, rel string) error {
	p := filepath.Join(im.dir, filepath.FromSlash(rel))
	if rel != "." {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			im.localErr = true
			return fmt.Errorf("create parent of %s: %w", rel, err)
		}
	}
	var err error
	switch hdr.Typeflag {
	case tar.TypeDir:
		if rel != "." {
			err = os.Mkdir(p, 0o700)
			if errors.Is(err, os.ErrExist) {
				if st, serr := os.Lstat(p); serr == nil && st.IsDir() {
					err = nil // created earlier as a parent
				}
			}
		}
		if err == nil {
			// Defer mode and mtime: a read-only dir must still accept its
			// children, and creating them would bump the mtime.
			im.dirs[rel] = dirMeta{path: p, hdr: hdr, mtime: hdr.ModTime}
			if err = im.chown(p, hdr); err == nil {
				err = setXattrs(p, hdr)
			}
		}
		if err != nil {
			im.localErr = true
			return fmt.Errorf("create directory %s: %w", rel, err)
		}
		return nil
	case tar.TypeReg:
		if err := im.writeFile(tr, hdr, p, rel); err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := os.Symlink(hdr.Linkname, p); err != nil {
			im.localErr = true
			return fmt.Errorf("create symlink %s: %w", rel, err)
		}
		im.symlinks[rel] = true
	case tar.TypeLink:
		target, err := im.safeName(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link %s: %w", rel, err)
		}
		if err := os.Link(filepath.Join(im.dir, filepath.FromSlash(target)), p); err != nil {
			im.localErr = true
			return fmt.Errorf("create hard link %s: %w", rel, err)
		}
		return nil // the link shares the target's metadata
	case tar.TypeFifo:
		if err := unix.Mkfifo(p, 0o600); err != nil {
			im.localErr = true
			return fmt.Errorf("create fifo %s: %w", rel, err)
		}
	case tar.TypeChar:
		if hdr.Devmajor != 0 || hdr.Devminor != 0 {
			return fmt.Errorf("import snapshot: %s: device %d:%d is not a whiteout", rel, hdr.Devmajor, hdr.Devminor)
		}
		if err := unix.Mknod(p, unix.S_IFCHR|0o600, 0); err != nil {
			im.localErr = true
			return fmt.Errorf("create whiteout %s: %w", rel, err)
		}
	default:
		return fmt.Errorf("import snapshot: %s: unsupported entry type %q", rel, hdr.Typeflag)
	}
	if err := im.applyMeta(p, hdr); err != nil {
		im.localErr = true
		return fmt.Errorf("set metadata of %s: %w", rel, err)
	}
	return nil
}

func (im *importer) writeFile(tr *tar.Reader, hdr *tar.Header, p, rel string) error {
	xs, realSize, err := parseSparse(hdr)
	if err != nil {
		return fmt.Errorf("import snapshot: %s: %w", rel, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		im.localErr = true
		return fmt.Errorf("create file %s: %w", rel, err)
	}
	defer f.Close()
	src := &ctxReader{ctx: im.ctx, r: tr}
	// Hide *os.File's ReaderFrom: its fallback copies 32 KiB at a time and
	// would ignore our 1 MiB buffer.
	dst := struct{ io.Writer }{f}
	if xs == nil {
		if _, err := io.CopyBuffer(dst, src, im.buf); err != nil {
			return fmt.Errorf("write file %s: %w", rel, err)
		}
	} else {
		// Seeking over the holes leaves them unallocated: the file comes
		// back as sparse as it left.
		for _, x := range xs {
			if x.len == 0 {
				continue
			}
			if _, err := f.Seek(x.off, io.SeekStart); err != nil {
				im.localErr = true
				return fmt.Errorf("seek file %s: %w", rel, err)
			}
			n, err := io.CopyBuffer(dst, io.LimitReader(src, x.len), im.buf)
			if err != nil {
				return fmt.Errorf("write file %s: %w", rel, err)
			}
			if n != x.len {
				return fmt.Errorf("write file %s: %w", rel, io.ErrUnexpectedEOF)
			}
		}
		if err := f.Truncate(realSize); err != nil {
			im.localErr = true
			return fmt.Errorf("size file %s: %w", rel, err)
		}
	}
	if err := f.Close(); err != nil {
		im.localErr = true
		return fmt.Errorf("close file %s: %w", rel, err)
	}
	return nil
}

// parseSparse returns the data extents and apparent size of a sparse entry,
// or nil extents for an ordinary one. The map is checked against the entry
// size so a bad map cannot make us read or seek out of bounds.
func parseSparse(hdr *tar.Header) ([]extent, int64, error) {
	mp, ok := hdr.PAXRecords[paxSparseMap]
	if !ok {
		return nil, 0, nil
	}
	realSize, err := strconv.ParseInt(hdr.PAXRecords[paxSparseRealSize], 10, 64)
	if err != nil || realSize < 0 {
		return nil, 0, fmt.Errorf("bad sparse size %q", hdr.PAXRecords[paxSparseRealSize])
	}
	parts := strings.Split(mp, ",")
	if len(parts)%2 != 0 {
		return nil, 0, fmt.Errorf("bad sparse map %q", mp)
	}
	xs := make([]extent, 0, len(parts)/2)
	var end, data int64
	for i := 0; i < len(parts); i += 2 {
		off, err1 := strconv.ParseInt(parts[i], 10, 64)
		n, err2 := strconv.ParseInt(parts[i+1], 10, 64)
		if err1 != nil || err2 != nil || off < end || n < 0 || off > realSize || n > realSize-off {
			return nil, 0, fmt.Errorf("bad sparse map %q", mp)
		}
		xs = append(xs, extent{off, n})
		end, data = off+n, data+n
	}
	if data != hdr.Size {
		return nil, 0, fmt.Errorf("sparse map covers %d bytes, entry has %d", data, hdr.Size)
	}
	return xs, realSize, nil
}

// applyMeta sets owner, xattrs, mode and mtime of a non-directory entry, in
// that order: chown clears setuid bits, so chmod must come after it.
func (im *importer) applyMeta(p string, hdr *tar.Header) error {
	if err := im.chown(p, hdr); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeSymlink {
		ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err := setXattrs(p, hdr); err != nil {
		return err
	}
	if err := os.Chmod(p, fileMode(hdr.Mode)); err != nil {
		return err
	}
	return os.Chtimes(p, hdr.ModTime, hdr.ModTime)
}

func (im *importer) chown(p string, hdr *tar.Header) error {
	return os.Lchown(p, hdr.Uid, hdr.Gid)
}

// finish applies directory modes and mtimes, deepest first so setting a
// parent's mtime is the last change beneath it. It runs once, after the last
// layer: a later layer's changes inside a directory bump its mtime.
func (im *importer) finish() error {
	names := make([]string, 0, len(im.dirs))
	for name := range im.dirs {
		names = append(names, name)
	}
	depth := func(name string) int {
		if name == "." {
			return -1
		}
		return strings.Count(name, "/")
	}
	slices.SortFunc(names, func(a, b string) int { return depth(b) - depth(a) })
	for _, name := range names {
		d := im.dirs[name]
		if err := os.Chmod(d.path, fileMode(d.hdr.Mode)); err != nil {
			return fmt.Errorf("set mode of %s: %w", d.path, err)
		}
		if err := os.Chtimes(d.path, d.mtime, d.mtime); err != nil {
			return fmt.Errorf("set mtime of %s: %w", d.path, err)
		}
	}
	return nil
}

func fileMode(m int64) os.FileMode {
	mode := os.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// clearXattrs removes p's extended attributes (but security.selinux, which a
// snapshot never holds), before a layer sets the ones it records.
func clearXattrs(p string) error {
	names, err := boxXattrs(p)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := unix.Lremovexattr(p, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("remove xattr %s: %w", name, err)
		}
	}
	return nil
}

// setXattrs restores SCHILY.xattr.* records. A filesystem that refuses one
// (tmpfs without trusted.*, no user xattrs) fails the import: silently
// dropping trusted.overlay.opaque would resurrect deleted lower-layer files.
func setXattrs(p string, hdr *tar.Header) error {
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, paxXattr)
		if !ok {
			continue
		}
		if err := unix.Lsetxattr(p, name, []byte(v), 0); err != nil {
			return fmt.Errorf("set xattr %s: %w", name, err)
		}
	}
	return nil
}
