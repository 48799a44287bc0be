package runtime

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// A process-runtime box runs in a user namespace that maps its uids and gids 0-65535 to host
// ids boxIDBase to boxIDBase+65535, which no host account uses. Root in the box is then
// nobody on the host: the host's kernel refuses it what only host root may do (core_pattern,
// sysrq, modules, raw devices), and files it creates on its disk are owned by that unprivileged
// uid on the host. Every box shares the one range: the process runtime serves a single user.
const (
	boxIDBase = 1 << 30
	boxIDSize = 1 << 16
)

func boxIDMappings() []syscall.SysProcIDMap {
	return []syscall.SysProcIDMap{{ContainerID: 0, HostID: boxIDBase, Size: boxIDSize}}
}

// selfExe opens the running binary, so that a child started in the box's user namespace can
// execute it through /proc/self/fd whatever the directories above it let that uid reach.
func selfExe() (*os.File, error) {
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("open own binary: %w", err)
	}
	return f, nil
}

// boxUserns returns a descriptor of a user namespace with the boxes' mapping, for idmapped
// mounts: a short-lived child of this binary holds it while the descriptor is opened.
func boxUserns() (int, error) {
	exe, err := selfExe()
	if err != nil {
		return -1, err
	}
	defer func() { _ = exe.Close() }()
	cmd := &exec.Cmd{
		Path:       "/proc/self/fd/3",
		Args:       []string{holdName},
		ExtraFiles: []*os.File{exe},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 syscall.CLONE_NEWUSER,
			UidMappings:                boxIDMappings(),
			GidMappings:                boxIDMappings(),
			GidMappingsEnableSetgroups: true,
			Pdeathsig:                  syscall.SIGKILL,
		},
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return -1, fmt.Errorf("hold box user namespace: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("hold box user namespace: %w", err)
	}
	defer func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open box user namespace: %w", err)
	}
	return fd, nil
}

// lowerDir is where a process-runtime box's image is attached, idmapped, as its overlay's lower
// layer: files the image has as root's are root's inside the box.
const lowerDir = "lower"

// mountIDMappedImage attaches spec.Rootfs at Dir/lower through an idmapped, read-only mount of
// the boxes' user namespace, unless it is there already.
func mountIDMappedImage(spec Spec, userns int) (string, error) {
	target := filepath.Join(spec.Dir, lowerDir)
	if mountRoot(target) {
		return target, nil
	}
	if err := os.MkdirAll(target, 0o700); err != nil {
		return "", fmt.Errorf("mount image: %w", err)
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, spec.Rootfs, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("mount image: clone %s: %w", spec.Rootfs, err)
	}
	defer func() { _ = unix.Close(tree) }()
	attr := &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(userns),
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return "", fmt.Errorf("mount image: idmap %s: %w", spec.Rootfs, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return "", fmt.Errorf("mount image: attach: %w", err)
	}
	return target, nil
}

// unmountImage detaches what mountIDMappedImage attached. It must succeed before the box's
// directory is removed: a removal that walked into the mount would reach the shared image.
func unmountImage(dir string) error {
	target := filepath.Join(dir, lowerDir)
	for mountRoot(target) {
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount image: %w", err)
		}
	}
	return nil
}

// mountRoot reports whether p is the root of a mount. Unlike mounted it also sees a bind or
// idmapped mount of the filesystem p's parent is on, whose device is the same.
func mountRoot(p string) bool {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &stx); err != nil {
		return false
	}
	return stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

// ownDiskRoot gives the disk's top directory to the box's root, so that it may create files in
// / (an overlay's root takes its owner from the upper layer's). Only that directory: the host
// never walks a tree the box can change.
func ownDiskRoot(spec Spec) error {
	disk := diskPath(spec.Dir)
	var st unix.Stat_t
	if err := unix.Lstat(disk, &st); err != nil {
		return fmt.Errorf("own disk: %w", err)
	}
	if st.Uid == boxIDBase && st.Gid == boxIDBase {
		return nil
	}
	if err := unix.Lchown(disk, boxIDBase, boxIDBase); err != nil {
		return fmt.Errorf("own disk: %w", err)
	}
	return nil
}

// closeUserns closes what boxUserns returned.
func closeUserns(fd int) error {
	if fd < 0 {
		return nil
	}
	if err := unix.Close(fd); err != nil {
		return fmt.Errorf("close box user namespace: %w", err)
	}
	return nil
}

// detachedOverlay makes the box's root filesystem as mountOverlay does, with the idmapped image
// at lower beneath the disk, but attached nowhere: the launcher attaches it in the box's own
// mount namespace, the only place it is ever mounted, so it goes away with the box's last
// process. The caller closes the returned mount.
func detachedOverlay(spec Spec, lower string) (*os.File, error) {
	fs, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("mount overlay: %w", err)
	}
	defer func() { _ = unix.Close(fs) }()
	for _, kv := range [][2]string{
		{"lowerdir", lower}, {"upperdir", diskPath(spec.Dir)}, {"workdir", workPath(spec.Dir)},
		{"index", "off"}, {"metacopy", "off"}, {"redirect_dir", "off"},
	} {
		if err := unix.FsconfigSetString(fs, kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("mount overlay: %s: %w", kv[0], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, fmt.Errorf("mount overlay: %w", err)
	}
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("mount overlay: %w", err)
	}
	return os.NewFile(uintptr(m), "box root"), nil
}
