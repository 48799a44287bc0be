package s3server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/versity/versitygw/backend/meta"
)

type metaStorer = meta.MetadataStorer

// Metadata modes reported in the start log line.
const (
	metaXattr   = "xattr"
	metaSidecar = "sidecar"
)

// xattrSupported is a variable so tests can force the sidecar fallback.
var xattrSupported = probeXattr

// chooseMeta picks where object metadata (ETag, content type, user metadata,
// bucket ACL) lives. versitygw keeps it in user.* xattrs by default, which
// ext4, xfs, btrfs and tmpfs (Linux 6.6+) support; other filesystems get
// sidecar files in metaDir. A metaDir that already exists wins even when
// xattrs work, so metadata written by an earlier sidecar run is not lost.
func chooseMeta(dir, metaDir string) (metaStorer, string, error) {
	metaDir, err := filepath.Abs(metaDir)
	if err != nil {
		return nil, "", fmt.Errorf("resolve meta dir: %w", err)
	}
	if metaDir == dir || strings.HasPrefix(metaDir, dir+string(filepath.Separator)) {
		// Inside the root it would show up as a bucket.
		return nil, "", fmt.Errorf("meta dir %s: must be outside %s", metaDir, dir)
	}
	if fi, err := os.Stat(metaDir); err == nil && fi.IsDir() {
		return sidecar(metaDir)
	}
	ok, err := xattrSupported(dir)
	if err != nil {
		return nil, "", err
	}
	if ok {
		return meta.XattrMeta{}, metaXattr, nil
	}
	if err := os.MkdirAll(metaDir, dirPerm); err != nil {
		return nil, "", fmt.Errorf("create meta dir: %w", err)
	}
	return sidecar(metaDir)
}

func sidecar(metaDir string) (metaStorer, string, error) {
	sc, err := meta.NewSideCar(metaDir)
	if err != nil {
		return nil, "", fmt.Errorf("open sidecar meta dir %s: %w", metaDir, err)
	}
	return sc, metaSidecar, nil
}

// probeXattr writes a user xattr through versitygw's own code path, which is
// stricter than meta.XattrMeta.Test: that one only reads, and some
// filesystems (tmpfs before Linux 6.6) allow reading user xattrs but not
// writing them.
func probeXattr(dir string) (bool, error) {
	f, err := os.CreateTemp(dir, ".xattr-probe-*")
	if err != nil {
		return false, fmt.Errorf("probe xattrs: %w", err)
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}()
	err = meta.XattrMeta{}.StoreAttribute(f, "", "", "cocoonbox-probe", []byte("1"))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, syscall.ENOTSUP), errors.Is(err, syscall.EPERM):
		// EPERM: user xattrs are refused on some special files and mounts.
		return false, nil
	default:
		return false, fmt.Errorf("probe xattrs: %w", err)
	}
}
