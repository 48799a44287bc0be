package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// mountOverlay mounts the box's root filesystem: the shared read-only image under the box's own
// writable disk. It is a host kernel overlay, not runsc's --overlay2, so the disk is a plain
// directory on the host that outlives the sandbox, survives checkpoints untouched (the memory
// image never contains it) and can be copied while the box runs.
//
// index, metacopy and redirect_dir are off so the upper layer holds whole files and real
// directories: a copy of it on top of the same image is the same disk, with no hidden
// references to inode numbers of the box it came from.
func mountOverlay(spec Spec) error {
	target := filepath.Join(spec.Dir, rootfsDir)
	if mounted(target) {
		return nil
	}
	for _, p := range []string{spec.Rootfs, spec.Dir} {
		if strings.ContainsAny(p, ",:") {
			return fmt.Errorf("mount overlay: path %q has a comma or colon", p)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,index=off,metacopy=off,redirect_dir=off",
		spec.Rootfs, filepath.Join(spec.Dir, diskDir), filepath.Join(spec.Dir, workDir))
	if err := unix.Mount("overlay", target, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	return nil
}

// unmountOverlay unmounts the box's root filesystem if it is mounted; a mount still held by a
// dying sandbox is detached lazily, so that removing the directory never walks into it.
func unmountOverlay(dir string) error {
	target := filepath.Join(dir, rootfsDir)
	for mounted(target) {
		err := unix.Unmount(target, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(target, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount overlay: %w", err)
		}
	}
	return nil
}

// unmountLazy detaches the mount at p.
func unmountLazy(p string) error { return unix.Unmount(p, unix.MNT_DETACH) }

// mounted reports whether p is a mount point: its device differs from its parent's.
func mounted(p string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(p, &st) != nil || unix.Lstat(filepath.Dir(p), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// socketPair returns two connected unix stream sockets as files: one end for the engine, one
// to hand to a process as its stdin and stdout.
func socketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("create socket pair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "engine"), os.NewFile(uintptr(fds[1]), "box"), nil
}
