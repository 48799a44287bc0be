package agentvm

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// Errors of an import the caller caused: an entry that would land outside the tree, a stream
// that is not a tar.
var (
	errUnsafeEntry = errors.New("unsafe tar entry")
	errBadTar      = errors.New("read tar")
)

// importReader reads the tar data of an Import stream, after its first message.
type importReader struct {
	stream grpc.ClientStreamingServer[agentvmv1.ImportRequest, agentvmv1.ImportResponse]
	path   string
	buf    []byte
}

func (r *importReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		msg, err := r.stream.Recv()
		if err != nil {
			return 0, err // io.EOF at the stream's end
		}
		if msg.GetPath() != "" && msg.GetPath() != r.path {
			return 0, fmt.Errorf("%w: path %q differs from the first message's", errInvalidPath, msg.GetPath())
		}
		r.buf = msg.GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Import replaces the tree with a tar stream. The tar is extracted into a temporary sibling of
// the tree, which then takes the tree's place by two renames: a failed import (a bad entry, a
// broken stream) leaves the old tree as it was.
func (s *stateService) Import(stream grpc.ClientStreamingServer[agentvmv1.ImportRequest, agentvmv1.ImportResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "path is required")
	}
	if err != nil {
		return err
	}
	root, err := treePath(first.GetPath())
	if err == nil && root == filepath.Dir(root) {
		err = fmt.Errorf("%w: cannot replace %s", errInvalidPath, root)
	}
	if err != nil {
		return stateStatus(ctx, err)
	}
	if err := os.MkdirAll(filepath.Dir(root), 0o755); err != nil {
		return stateStatus(ctx, fmt.Errorf("import tree: %w", err))
	}
	tmp, err := os.MkdirTemp(filepath.Dir(root), "."+filepath.Base(root)+".import-")
	if err != nil {
		return stateStatus(ctx, fmt.Errorf("import tree: %w", err))
	}
	defer func() { _ = os.RemoveAll(tmp) }() // gone after the swap; the partial tree otherwise

	r := &importReader{stream: stream, path: first.GetPath(), buf: first.GetData()}
	x := &extractor{root: tmp, chown: os.Geteuid() == 0}
	if err := x.inherit(root); err != nil {
		return stateStatus(ctx, fmt.Errorf("import tree: %w", err))
	}
	if err := x.extract(tar.NewReader(r)); err != nil {
		return stateStatus(ctx, fmt.Errorf("import tree: %w", err))
	}
	if err := ctx.Err(); err != nil {
		return stateStatus(ctx, err)
	}
	if err := swap(root, tmp); err != nil {
		return stateStatus(ctx, fmt.Errorf("import tree: %w", err))
	}
	s.log.Info("imported tree", "path", root, "files", x.files, "bytes", x.bytes, "skipped", x.skipped)
	return stream.SendAndClose(&agentvmv1.ImportResponse{Bytes: x.bytes, Files: x.files})
}

// swap puts the tree extracted at tmp in root's place, and removes the old tree. A root that is
// a directory of the box's image (an overlay lower directory, which the kernel will not rename:
// EXDEV) keeps its place and has its contents replaced instead, which is not atomic: a failure
// part way leaves a tree of both, as a restore's fresh box, discarded on failure, can afford.
func swap(root, tmp string) error {
	old := tmp + ".old"
	if _, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
		return os.Rename(tmp, root)
	}
	err := os.Rename(root, old)
	if errors.Is(err, syscall.EXDEV) {
		return replaceContents(root, tmp)
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, root); err != nil {
		if rerr := os.Rename(old, root); rerr != nil {
			return fmt.Errorf("%w (and restoring the old tree from %s: %v)", err, old, rerr)
		}
		return err
	}
	return os.RemoveAll(old)
}

// replaceContents empties root, moves tmp's entries into it (tmp is new, so they move within one
// layer) and gives root tmp's owner, mode and mtime.
func replaceContents(root, tmp string) error {
	olds, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, e := range olds {
		if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
			return err
		}
	}
	news, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	for _, e := range news {
		if err := os.Rename(filepath.Join(tmp, e.Name()), filepath.Join(root, e.Name())); err != nil {
			return err
		}
	}
	fi, err := os.Stat(tmp)
	if err != nil {
		return err
	}
	if uid, gid, ok := owner(fi); ok && os.Geteuid() == 0 {
		if err := os.Chown(root, uid, gid); err != nil {
			return err
		}
	}
	if err := os.Chmod(root, fi.Mode()&(fs.ModePerm|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	return os.Chtimes(root, fi.ModTime(), fi.ModTime())
}

// extractor writes a tar's entries under root, refusing any that would land outside it.
type extractor struct {
	root    string
	chown   bool // as root: owners are restored
	files   int64
	bytes   int64
	skipped int64
	dirs    []*tar.Header // applied last, deepest first: creating entries changes a directory's mtime
}

// inherit gives the new tree the old one's mode and owner (0755, the agent's, when there is none
// yet), for a tar without an entry for the tree itself ("./"); Export always writes one.
func (x *extractor) inherit(root string) error {
	fi, err := os.Stat(root)
	if errors.Is(err, fs.ErrNotExist) {
		return os.Chmod(x.root, 0o755)
	}
	if err != nil {
		return err
	}
	if uid, gid, ok := owner(fi); ok && x.chown {
		if err := os.Chown(x.root, uid, gid); err != nil {
			return err
		}
	}
	return os.Chmod(x.root, fi.Mode()&(fs.ModePerm|fs.ModeSetgid|fs.ModeSticky))
}

func (x *extractor) extract(tr *tar.Reader) error {
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if _, ok := status.FromError(err); ok {
				return err // the stream broke
			}
			return fmt.Errorf("%w: %v", errBadTar, err)
		}
		if err := x.entry(tr, hdr); err != nil {
			return err
		}
	}
	slices.SortFunc(x.dirs, func(a, b *tar.Header) int { return len(b.Name) - len(a.Name) })
	for _, hdr := range x.dirs {
		p, ok := x.dir(hdr.Name)
		if !ok {
			continue // replaced by a later entry
		}
		if err := x.attrs(p, hdr); err != nil {
			return err
		}
	}
	return nil
}

// dir returns where the directory named n was extracted, unless it or a directory on the way
// has since been replaced by something else (a symlink, say).
func (x *extractor) dir(n string) (string, bool) {
	clean, _ := name(n) // validated when extracted
	p := x.root
	if clean != "." {
		for _, part := range strings.Split(clean, "/") {
			p = filepath.Join(p, part)
			if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
				return "", false
			}
		}
	}
	return p, true
}

// name validates an entry's name and returns it cleaned ("." for the root).
func name(n string) (string, error) {
	if n == "" || strings.ContainsRune(n, 0) || strings.Contains(n, `\`) {
		return "", fmt.Errorf("%w: name %q", errUnsafeEntry, n)
	}
	if path.IsAbs(n) {
		return "", fmt.Errorf("%w: %q is absolute", errUnsafeEntry, n)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: %q leaves the tree", errUnsafeEntry, n)
		}
	}
	return path.Clean(n), nil
}

// target validates name and returns where it goes, after checking that no directory on the way
// is a symlink (an earlier entry pointing elsewhere) and creating missing ones.
func (x *extractor) target(n string) (string, error) {
	clean, err := name(n)
	if err != nil {
		return "", err
	}
	if clean == "." {
		return x.root, nil
	}
	parts := strings.Split(clean, "/")
	dir := x.root
	for _, part := range parts[:len(parts)-1] {
		dir = filepath.Join(dir, part)
		fi, err := os.Lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(dir, 0o755); err != nil {
				return "", err
			}
		case err != nil:
			return "", err
		case fi.Mode()&fs.ModeSymlink != 0:
			return "", fmt.Errorf("%w: %q goes through the symlink %q", errUnsafeEntry, n, strings.TrimPrefix(dir, x.root+"/"))
		case !fi.IsDir():
			return "", fmt.Errorf("%w: %q goes through the file %q", errUnsafeEntry, n, strings.TrimPrefix(dir, x.root+"/"))
		}
	}
	return filepath.Join(dir, parts[len(parts)-1]), nil
}

// clearFor removes what an earlier entry left at p, unless it is a directory and a directory is
// wanted: a later entry of a tar replaces an earlier one, and a file is never written through
// a symlink.
func clearFor(p string, dir bool) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if dir && fi.IsDir() {
		return nil
	}
	return os.RemoveAll(p)
}

func (x *extractor) entry(tr *tar.Reader, hdr *tar.Header) error {
	p, err := x.target(hdr.Name)
	if err != nil {
		return err
	}
	if p == x.root && hdr.Typeflag != tar.TypeDir {
		return fmt.Errorf("%w: %q would replace the tree itself", errUnsafeEntry, hdr.Name)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := clearFor(p, true); err != nil {
			return err
		}
		if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		x.dirs = append(x.dirs, hdr)
		return nil
	case tar.TypeReg, tar.TypeRegA:
		if err := clearFor(p, false); err != nil {
			return err
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		n, err := io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", hdr.Name, err)
		}
		x.bytes += n
	case tar.TypeSymlink:
		if err := clearFor(p, false); err != nil {
			return err
		}
		// A symlink may point anywhere (its target is only text here): nothing is ever
		// written through one, as target and clearFor see to.
		if err := os.Symlink(hdr.Linkname, p); err != nil {
			return err
		}
	case tar.TypeLink:
		src, err := x.target(hdr.Linkname)
		if err != nil {
			return err
		}
		if fi, err := os.Lstat(src); err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: hard link %q to %q, not a file extracted before it", errUnsafeEntry, hdr.Name, hdr.Linkname)
		}
		if err := clearFor(p, false); err != nil {
			return err
		}
		if err := os.Link(src, p); err != nil {
			return err
		}
		x.files++
		return nil // the link shares its source's attributes
	case tar.TypeXGlobalHeader:
		return nil
	default: // devices and FIFOs have no place in a home directory
		x.skipped++
		return nil
	}
	x.files++
	return x.attrs(p, hdr)
}

// attrs restores an entry's owner, mode and mtime (owner first: chown clears setuid bits).
func (x *extractor) attrs(p string, hdr *tar.Header) error {
	if x.chown {
		if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	if hdr.Typeflag == tar.TypeSymlink {
		return lchtimes(p, hdr.ModTime)
	}
	if err := os.Chmod(p, hdr.FileInfo().Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	return os.Chtimes(p, time.Time{}, hdr.ModTime)
}
