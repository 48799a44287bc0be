package runtime

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// The process runtime's boxes are started by the engine's own binary, re-executed under these
// names (argv[0]) before its main runs: the code that confines a box must run inside the box's
// new namespaces but before anything from the box's disk does, and only a trusted binary can
// do that. The box's init is on a disk the box can write, so a box could replace it; whatever
// it is, it starts confined.
const (
	launchName = "cocoonbox-box-launch"  // PID 1 of a new box until it execs the box's init
	holdName   = "cocoonbox-userns-hold" // holds a user namespace open until its stdin closes
)

func init() {
	if len(os.Args) == 0 {
		return
	}
	switch os.Args[0] {
	case launchName:
		err := launch(os.Args[1:])
		fmt.Fprintln(os.Stderr, "cocoonbox box launch:", err) // launch returns only on failure
		os.Exit(1)
	case holdName:
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
}

// OCI runtimes' default masked and read-only paths (runc's and Docker's lists): files under
// /proc and /sys that show or change the host kernel rather than the box.
var (
	maskedPaths = []string{
		"proc/acpi", "proc/asound", "proc/interrupts", "proc/kcore", "proc/keys",
		"proc/latency_stats", "proc/timer_list", "proc/timer_stats", "proc/sched_debug",
		"proc/scsi", "proc/kmsg", "sys/firmware", "sys/devices/virtual/powercap",
	}
	readOnlyPaths = []string{"proc/bus", "proc/fs", "proc/irq", "proc/sys", "proc/sysrq-trigger"}
)

// launch confines the calling process, which the engine started as PID 1 of new user, mount,
// PID, network, UTS and IPC namespaces, and then executes the box's init in its place.
// Descriptor 3 is this binary, 4 the engine's sync pipe, 5 the box's overlay root, detached.
func launch(args []string) error {
	goruntime.LockOSThread() // credentials and the seccomp filter are the thread's; exec keeps this one's
	if len(args) != 0 {
		return errors.New("usage: " + launchName + " (started by the engine only)")
	}
	_ = unix.Close(3)
	// The engine writes one byte once the process is in the box's cgroup.
	sync := os.NewFile(4, "sync")
	if _, err := sync.Read(make([]byte, 1)); err != nil {
		return fmt.Errorf("wait for the engine: %w", err)
	}
	_ = sync.Close()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	// Attach the box's root, a detached mount, where any uid can reach it in this namespace
	// (private now, so the host's /tmp is untouched), and hold it by a descriptor from here on.
	if err := unix.MoveMount(5, "", unix.AT_FDCWD, "/tmp", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach box root: %w", err)
	}
	_ = unix.Close(5)
	root, err := unix.Open("/tmp", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open box root: %w", err)
	}
	if err := mountBoxFilesystems(root); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte("box")); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	// Leave the host's filesystem behind: after this the box's root is the only tree there is,
	// so no chroot escape has anything to reach.
	if err := unix.Fchdir(root); err != nil {
		return fmt.Errorf("enter box root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("enter box root: %w", err)
	}
	if err := dropBoundingSet(); err != nil {
		return err
	}
	if err := installSeccomp(); err != nil {
		return err
	}
	env := os.Environ()
	return fmt.Errorf("exec init: %w", unix.Exec(boxproto.InitPath, []string{boxproto.InitPath}, env))
}

// mountBoxFilesystems mounts /proc (with the masked and read-only paths), a read-only /sys and
// a /dev of the few devices a box needs, under the box's root. Every target is resolved inside
// that root, so a symlink the box left on its disk cannot send a mount elsewhere.
func mountBoxFilesystems(root int) error {
	type mnt struct {
		src, target, fstype, data string
		flags                     uintptr
	}
	for _, m := range []mnt{
		{"proc", "proc", "proc", "", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"sysfs", "sys", "sysfs", "", unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"tmpfs", "dev", "tmpfs", "mode=755,size=65536k", unix.MS_NOSUID | unix.MS_NOEXEC},
	} {
		if err := mountAt(root, m.target, m.src, m.fstype, m.flags, m.data, true); err != nil {
			return err
		}
	}
	for _, p := range maskedPaths {
		if err := mask(root, p); err != nil {
			return err
		}
	}
	for _, p := range readOnlyPaths {
		if err := bindReadOnly(root, p); err != nil {
			return err
		}
	}
	return populateDev(root)
}

// openIn opens rel beneath root as an O_PATH descriptor; symlinks resolve as if root were /.
func openIn(root int, rel string, flags uint64) (int, error) {
	return unix.Openat2(root, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | flags,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// fdPath names an open descriptor so that mount(2) acts on exactly what it refers to.
func fdPath(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }

// mountAt mounts src on rel beneath root, creating rel as a directory if create is set.
func mountAt(root int, rel, src, fstype string, flags uintptr, data string, create bool) error {
	if create {
		if err := unix.Mkdirat(root, rel, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			// A box that replaced the directory with a symlink keeps it; openIn follows it
			// inside the box.
			return fmt.Errorf("create /%s: %w", rel, err)
		}
	}
	fd, err := openIn(root, rel, 0)
	if err != nil {
		return fmt.Errorf("open /%s: %w", rel, err)
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.Mount(src, fdPath(fd), fstype, flags, data); err != nil {
		return fmt.Errorf("mount /%s: %w", rel, err)
	}
	return nil
}

// mask hides rel: a directory under an empty read-only tmpfs, a file under /dev/null. A path
// this kernel does not have needs no mask.
func mask(root int, rel string) error {
	fd, err := openIn(root, rel, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mask /%s: %w", rel, err)
	}
	defer func() { _ = unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("mask /%s: %w", rel, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = unix.Mount("tmpfs", fdPath(fd), "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0")
	} else {
		err = unix.Mount("/dev/null", fdPath(fd), "", unix.MS_BIND, "")
	}
	if err != nil {
		return fmt.Errorf("mask /%s: %w", rel, err)
	}
	return nil
}

// bindReadOnly makes rel read-only: a bind of itself, remounted read-only.
func bindReadOnly(root int, rel string) error {
	fd, err := openIn(root, rel, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("make /%s read-only: %w", rel, err)
	}
	defer func() { _ = unix.Close(fd) }()
	p := fdPath(fd)
	if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make /%s read-only: %w", rel, err)
	}
	// The bind is a new mount on the same path; reopen to reach it rather than what it covers.
	fd2, err := openIn(root, rel, 0)
	if err != nil {
		return fmt.Errorf("make /%s read-only: %w", rel, err)
	}
	defer func() { _ = unix.Close(fd2) }()
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount("", fdPath(fd2), "", flags, ""); err != nil {
		return fmt.Errorf("make /%s read-only: %w", rel, err)
	}
	return nil
}

// boxDevices are the host's device nodes a box gets, bound one by one: a user namespace may not
// make device nodes, and binding the host's /dev would give it every disk.
var boxDevices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// populateDev fills the box's fresh /dev tmpfs.
func populateDev(root int) error {
	for _, d := range boxDevices {
		fd, err := unix.Openat2(root, "dev/"+d, &unix.OpenHow{
			Flags: unix.O_CREAT | unix.O_EXCL | unix.O_WRONLY | unix.O_CLOEXEC, Mode: 0o666,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS,
		})
		if err != nil {
			return fmt.Errorf("create /dev/%s: %w", d, err)
		}
		err = unix.Mount(filepath.Join("/dev", d), fdPath(fd), "", unix.MS_BIND, "")
		_ = unix.Close(fd)
		if err != nil {
			return fmt.Errorf("bind /dev/%s: %w", d, err)
		}
	}
	dev, err := openIn(root, "dev", unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("open /dev: %w", err)
	}
	defer func() { _ = unix.Close(dev) }()
	for link, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
		"stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx",
	} {
		if err := unix.Symlinkat(target, dev, link); err != nil {
			return fmt.Errorf("link /dev/%s: %w", link, err)
		}
	}
	for _, m := range []struct{ rel, fstype, data string }{
		{"dev/pts", "devpts", "newinstance,ptmxmode=0666,mode=0620"},
		{"dev/shm", "tmpfs", "mode=1777"},
	} {
		flags := uintptr(unix.MS_NOSUID | unix.MS_NOEXEC)
		if m.fstype == "tmpfs" {
			flags = unix.MS_NOSUID | unix.MS_NODEV
		}
		if err := mountAt(root, m.rel, m.fstype, m.fstype, flags, m.data, true); err != nil {
			return err
		}
	}
	return nil
}

// keptCaps are Docker's defaults less CAP_SYS_CHROOT and CAP_MKNOD. They are capabilities in
// the box's user namespace only: none of them is anything on the host.
var keptCaps = map[int]bool{
	unix.CAP_CHOWN: true, unix.CAP_DAC_OVERRIDE: true, unix.CAP_FOWNER: true, unix.CAP_FSETID: true,
	unix.CAP_KILL: true, unix.CAP_SETGID: true, unix.CAP_SETUID: true, unix.CAP_SETPCAP: true,
	unix.CAP_NET_BIND_SERVICE: true, unix.CAP_NET_RAW: true, unix.CAP_AUDIT_WRITE: true,
	unix.CAP_SETFCAP: true,
}

// dropBoundingSet shrinks the calling thread's bounding set, which exec passes on: the init
// and every command it spawns run as a root that cannot mount, trace, or change the network.
func dropBoundingSet() error {
	last := unix.CAP_LAST_CAP
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &n); err == nil {
			last = n
		}
	}
	for c := 0; c <= last; c++ {
		if keptCaps[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
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
