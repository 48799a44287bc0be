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
	if err := mountDisk(spec.Dir); err != nil {
		return err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,index=off,metacopy=off,redirect_dir=off",
		spec.Rootfs, diskPath(spec.Dir), workPath(spec.Dir))
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	return nil
}

// mountDisk makes the box's disk reachable at diskPath: its Dir a nosuid,nodev mount of its
// own, and its volume mounted on that.
func mountDisk(dir string) error {
	if err := mountBoxDir(dir); err != nil {
		return err
	}
	if legacyDisk(dir) {
		return nil
	}
	return mountVolume(dir)
}

// mountBoxDir makes the box's Dir a mount of its own with nosuid and nodev while the box runs,
// so that nothing the box writes into its disk acts on the host as a setuid binary or a device,
// whichever path reaches it.
func mountBoxDir(dir string) error {
	if bindMounted(dir) {
		return nil
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount box dir: %w", err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		return fmt.Errorf("mount box dir nosuid,nodev: %w", err)
	}
	return nil
}

// bindMounted reports whether p is a bind mount of a directory of its parent's filesystem (the
// mount mountBoxDir makes): a mount of its own, on the same device.
func bindMounted(p string) bool {
	var st, parent unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st) != nil ||
		unix.Statx(unix.AT_FDCWD, filepath.Dir(p), unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &parent) != nil {
		return false
	}
	return st.Mnt_id != parent.Mnt_id && st.Dev_major == parent.Dev_major && st.Dev_minor == parent.Dev_minor
}

// unmountOverlay unmounts the box's root filesystem, then its volume, then its Dir, those of
// them that are mounted; a mount still held by a dying sandbox is detached lazily, so that
// removing the directory never walks into it.
func unmountOverlay(dir string) error {
	for _, m := range []struct {
		path string
		is   func(string) bool
		what string
	}{
		{filepath.Join(dir, rootfsDir), mounted, "overlay"},
		{filepath.Join(dir, volumeDir), mounted, "disk"},
		{dir, bindMounted, "box dir"},
	} {
		for m.is(m.path) {
			err := unix.Unmount(m.path, 0)
			if errors.Is(err, unix.EBUSY) {
				err = unix.Unmount(m.path, unix.MNT_DETACH)
			}
			if err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmount %s: %w", m.what, err)
			}
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
