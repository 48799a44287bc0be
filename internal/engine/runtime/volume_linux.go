package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A box's disk is a filesystem of its own, so that one box cannot fill the host's disk: an ext4
// filesystem in a sparse file of the box's quota (Dir/disk.img), loop-mounted at Dir/vol while
// the engine uses it. The overlay's upper and work directories are on it (vol/disk, vol/work). A
// box that writes past its quota gets ENOSPC inside the box, like any full disk; the host keeps
// its space. The file is sparse and the filesystem is mounted with discard, so it takes on the
// host about what the box stores, not its quota.
//
// The image is written only by the host kernel's ext4, from writes gVisor's gofer (or the
// process runtime's box) makes to files on it: no box ever hands the engine a filesystem image to
// mount. Snapshots are file trees (see copyDisk), never images.
//
// One image file is only ever attached to one loop device: mounting it again (after a hibernate,
// or beside a lazily detached mount a dying sandbox still holds) reuses the device already
// attached to it, so two ext4 superblocks never write the same file.

// mkfsExt4 finds mkfs.ext4, which a PATH without sbin may not name.
func mkfsExt4() (string, error) {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("per-box disk quotas need mkfs.ext4 (Debian's e2fsprogs; scripts/deps.sh installs it)")
}

// volumesSupported reports why this host cannot give boxes disks of their own, or nil.
func volumesSupported() error {
	if _, err := mkfsExt4(); err != nil {
		return err
	}
	f, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("per-box disk quotas need loop devices: %w (load the loop module: modprobe loop)", err)
	}
	return f.Close()
}

// makeVolume creates the box's disk image of mb MiB with an empty ext4 filesystem, unless it is
// there already. It is made beside its final name and renamed, so a crash never leaves half an
// image that a later start would mount.
func makeVolume(dir string, mb int) error {
	img := filepath.Join(dir, volumeImage)
	if exists(img) {
		return nil
	}
	if mb <= 0 {
		return fmt.Errorf("make disk: bad disk size %d MiB", mb)
	}
	mkfs, err := mkfsExt4()
	if err != nil {
		return err
	}
	tmp := img + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("make disk: %w", err)
	}
	err = f.Truncate(int64(mb) << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("make disk: %w", err)
	}
	// The file reads as zeros, so ext4 need not zero its inode tables or journal (lazy_*), nor
	// discard blocks it never wrote. No blocks are reserved for root: the box's root is its user.
	var out bytes.Buffer
	cmd := exec.Command(mkfs, "-q", "-F", "-m", "0", "-L", "cocoonbox",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0", tmp)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("make disk: mkfs.ext4: %w: %s", err, strings.TrimSpace(out.String()))
	}
	if err := os.Rename(tmp, img); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("make disk: %w", err)
	}
	return nil
}

// mountVolume mounts the box's disk image at Dir/vol (nosuid, nodev, discard) unless it is
// mounted, and makes sure the overlay's directories are on it. The caller has made Dir a mount
// of its own first (mountBoxDir), so the volume is mounted on that, never hidden beneath it.
func mountVolume(dir string) error {
	target := filepath.Join(dir, volumeDir)
	if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("mount disk: %w", err)
	}
	if !mounted(target) {
		dev, err := attachLoop(filepath.Join(dir, volumeImage))
		if err != nil {
			return fmt.Errorf("mount disk: %w", err)
		}
		err = unix.Mount(dev.Name(), target, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "discard")
		_ = dev.Close() // the mount holds the device now; with autoclear it detaches on unmount
		if err != nil {
			return fmt.Errorf("mount disk: %w", err)
		}
	}
	if err := os.Chmod(target, 0o700); err != nil {
		return fmt.Errorf("mount disk: %w", err)
	}
	for _, d := range []struct {
		name string
		perm os.FileMode
	}{{diskDir, 0o755}, {workDir, 0o700}} {
		if err := os.Mkdir(filepath.Join(target, d.name), d.perm); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("mount disk: %w", err)
		}
	}
	return nil
}

// attachLoop returns an open loop device backed by img: the one already attached to it, or a
// free one attached now with autoclear (it detaches when its last mount and opener go, so an
// engine killed between attaching and mounting leaks no device) and direct I/O (the host does
// not cache the box's blocks twice, once for the image file and once for ext4).
func attachLoop(img string) (*os.File, error) {
	if dev := loopOf(img); dev != "" {
		if f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
			return f, nil
		}
	}
	backing, err := os.OpenFile(img, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = backing.Close() }()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open loop control: %w", err)
	}
	defer func() { _ = ctl.Close() }()
	flags := uint32(unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO)
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open loop device: %w", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd()), Info: unix.LoopInfo64{Flags: flags}}
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		_ = dev.Close()
		switch {
		case errors.Is(err, unix.EINVAL) && flags&unix.LO_FLAGS_DIRECT_IO != 0:
			flags &^= unix.LO_FLAGS_DIRECT_IO // a backing filesystem without O_DIRECT
		case errors.Is(err, unix.EBUSY) && attempt < 16:
			time.Sleep(time.Millisecond) // another attach took the device first
		default:
			return nil, fmt.Errorf("attach loop device: %w", err)
		}
	}
}

// loopOf returns the loop device attached to img, or "". It compares the device's backing file
// by inode, not by name: a file opened through a mount that was since detached (a box dir whose
// unmount had to be lazy) no longer shows its path, and attaching a second device to it would
// let two ext4 superblocks write one image.
func loopOf(img string) string {
	var want unix.Stat_t
	if unix.Stat(img, &want) != nil {
		return ""
	}
	attached, _ := filepath.Glob("/sys/block/loop*/loop")
	for _, p := range attached {
		dev := "/dev/" + filepath.Base(filepath.Dir(p))
		f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
		_ = f.Close()
		if err == nil && info.Inode == want.Ino && info.Device == want.Dev {
			return dev
		}
	}
	return ""
}

// volumeUsage reports the bytes used and the size of the box's mounted volume.
func volumeUsage(dir string) (used, size int64, ok bool) {
	target := filepath.Join(dir, volumeDir)
	if !mounted(target) {
		return 0, 0, false
	}
	var st unix.Statfs_t
	if unix.Statfs(target, &st) != nil {
		return 0, 0, false
	}
	bs := int64(st.Bsize)
	return (int64(st.Blocks) - int64(st.Bfree)) * bs, int64(st.Blocks) * bs, true
}
