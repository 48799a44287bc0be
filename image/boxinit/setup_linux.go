package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setupNamespaces prepares a box for the process runtime, which starts the init chrooted into
// the box's overlay in new mount, PID, network, UTS and IPC namespaces and leaves the rest to
// it: only a process inside those namespaces can mount a /proc that shows the box's PIDs.
func setupNamespaces() error {
	// Nothing mounted here may leak back into the host's mount namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	mounts := []struct {
		fstype, target, data string
		flags                uintptr
	}{
		{"proc", "/proc", "", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"sysfs", "/sys", "", unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"tmpfs", "/dev", "mode=755,size=65536k", unix.MS_NOSUID},
	}
	for _, m := range mounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", m.target, err)
		}
		if err := unix.Mount(m.fstype, m.target, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("mount %s: %w", m.target, err)
		}
	}
	devices := []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}}
	for _, d := range devices {
		if err := unix.Mknod("/dev/"+d.name, unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			return fmt.Errorf("create /dev/%s: %w", d.name, err)
		}
		// mknod honours the umask; devices must be usable by everyone.
		if err := os.Chmod("/dev/"+d.name, 0o666); err != nil {
			return fmt.Errorf("chmod /dev/%s: %w", d.name, err)
		}
	}
	for link, target := range map[string]string{
		"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0",
		"/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2", "/dev/ptmx": "pts/ptmx",
	} {
		if err := os.Symlink(target, link); err != nil {
			return fmt.Errorf("link %s: %w", link, err)
		}
	}
	for _, d := range []string{"/dev/pts", "/dev/shm"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mount /dev/pts: %w", err)
	}
	if err := unix.Mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	if err := unix.Sethostname([]byte("box")); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	return dropCapabilities()
}

// keptCaps are Docker's defaults less CAP_SYS_CHROOT and CAP_MKNOD: the box's root is a chroot,
// not a pivot_root, and there is no device cgroup, so either would let root in the box out.
var keptCaps = map[int]bool{
	unix.CAP_CHOWN: true, unix.CAP_DAC_OVERRIDE: true, unix.CAP_FOWNER: true, unix.CAP_FSETID: true,
	unix.CAP_KILL: true, unix.CAP_SETGID: true, unix.CAP_SETUID: true, unix.CAP_SETPCAP: true,
	unix.CAP_NET_BIND_SERVICE: true, unix.CAP_NET_RAW: true, unix.CAP_AUDIT_WRITE: true,
	unix.CAP_SETFCAP: true,
}

// dropCapabilities shrinks the bounding set, so every command the init spawns runs as a root
// that cannot mount, load modules, trace, make devices or chroot again. The init keeps its own
// capabilities; it runs nothing but the engine's requests. (Under gVisor runsc applies the OCI
// spec's capabilities, and the sentry is the boundary anyway.)
func dropCapabilities() error {
	last := unix.CAP_LAST_CAP
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	for c := 0; c <= last; c++ {
		if keptCaps[c] {
			continue
		}
		if err := dropBounding(c); err != nil {
			return err
		}
	}
	return nil
}

// dropBounding takes capability c out of the bounding set: no command the init starts has it,
// while the init keeps it.
func dropBounding(c int) error {
	// The bounding set is per thread, and any Go thread may be the one that forks.
	_, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0)
	if errno != 0 && errno != syscall.EINVAL {
		return fmt.Errorf("drop capability %d: %w", c, errno)
	}
	return nil
}

// loopbackUp brings lo up: a new network namespace starts with it down, and relays reach the
// box's services on 127.0.0.1.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// setHostname sets the kernel's hostname: the init's own capability, which nothing it starts has.
func setHostname(h string) error { return unix.Sethostname([]byte(h)) }

// shedAdmin takes CAP_SYS_ADMIN from this process for good (effective, permitted, inheritable
// and bounding): a relay the engine starts with runsc exec gets the capabilities of the box's
// spec, which give the init CAP_SYS_ADMIN, and a relay needs none of them.
func shedAdmin() error {
	if err := dropBounding(unix.CAP_SYS_ADMIN); err != nil {
		return err
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	admin := uint32(1) << unix.CAP_SYS_ADMIN // below 32: the first word
	data[0].Effective &^= admin
	data[0].Permitted &^= admin
	data[0].Inheritable &^= admin
	// Capabilities are per thread, and any Go thread may be the one that runs the relay.
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	if errno != 0 {
		return fmt.Errorf("drop CAP_SYS_ADMIN: %w", errno)
	}
	return nil
}
