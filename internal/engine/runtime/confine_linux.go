package runtime

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/loomhand/cocoonbox/internal/snapshot"
)

// A box disk is copied by a child process of the engine (its own executable, run again under
// copierArg0) that cannot reach the engine's files even if the walker had a bug: it runs in new
// mount, PID, network, IPC and UTS namespaces whose root is an empty tmpfs holding only the source
// (read-only) and the destination, as the unprivileged user nobody keeping only the capabilities
// a faithful copy needs (owners, modes, device whiteouts, trusted.* xattrs, reading any file).
// A symlink the walker never follows would point at nothing there anyway.

// copierArg0 is the argv[0] under which this package's init runs the copier instead of the
// program; the arguments are the private root to build, the source and the destination, and
// copierSince for a copy of what changed since the base index on its standard input, which
// writes the index of the whole source to its standard output (copyTreeSince).
const copierArg0 = "cocoonbox-copy-disk"

const copierSince = "since"

// nobody is the unprivileged identity the copier runs as.
const nobody = 65534

// copierCaps are the copier's only capabilities: chown and set any owner, keep setuid bits,
// create whiteouts, read and write trusted.* xattrs, read and write every file and directory, and
// set up its mount namespace.
var copierCaps = []uintptr{
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER,
	unix.CAP_FSETID, unix.CAP_MKNOD, unix.CAP_SYS_ADMIN,
}

func init() {
	if (len(os.Args) == 4 || len(os.Args) == 5 && os.Args[4] == copierSince) && os.Args[0] == copierArg0 {
		if err := copierMain(os.Args[1], os.Args[2], os.Args[3], len(os.Args) == 5); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// confinedCopy copies the directory src into the empty directory dst with the walker in a
// confined child process (see copierArg0).
func confinedCopy(ctx context.Context, src, dst string) error {
	return confined(ctx, src, dst, nil, nil)
}

// confinedCopySince is confinedCopy of what changed since base (an index stream), writing the
// index of the whole of src to index (see copyTreeSince).
func confinedCopySince(ctx context.Context, src, dst string, base []byte, index io.Writer) error {
	return confined(ctx, src, dst, base, index)
}

func confined(ctx context.Context, src, dst string, base []byte, index io.Writer) error {
	root, err := os.MkdirTemp(filepath.Dir(dst), ".copy-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(root) }()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "/proc/self/exe", root, src, dst)
	if base != nil {
		cmd.Args = append(cmd.Args, copierSince)
		cmd.Stdin, cmd.Stdout = bytes.NewReader(base), index
	}
	cmd.Args[0] = copierArg0
	cmd.Env = []string{}
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS,
		Credential:  &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}},
		AmbientCaps: copierCaps,
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return fmt.Errorf("%w: %s", err, msg)
		}
		return err
	}
	return nil
}

// copierMain is the confined child: it builds its root from root, src and dst, forgets the
// host's, and copies.
func copierMain(root, src, dst string, since bool) error {
	var base *snapshot.Index
	if since {
		var err error
		if base, err = snapshot.ReadIndex(os.Stdin, 0); err != nil {
			return fmt.Errorf("base index: %w", err)
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16k,mode=0700"); err != nil {
		return fmt.Errorf("mount private root: %w", err)
	}
	for _, b := range []struct {
		from, to string
		flags    uintptr
	}{{src, "src", unix.MS_RDONLY}, {dst, "dst", 0}} {
		to := filepath.Join(root, b.to)
		if err := unix.Mkdir(to, 0o700); err != nil {
			return fmt.Errorf("make %s: %w", b.to, err)
		}
		if err := unix.Mount(b.from, to, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", b.to, err)
		}
		flags := unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | b.flags
		if err := unix.Mount("", to, "", flags, ""); err != nil {
			return fmt.Errorf("remount %s: %w", b.to, err)
		}
	}
	old := filepath.Join(root, "old")
	if err := unix.Mkdir(old, 0o700); err != nil {
		return fmt.Errorf("make old root: %w", err)
	}
	if err := unix.PivotRoot(root, old); err != nil {
		return fmt.Errorf("pivot root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("enter private root: %w", err)
	}
	if err := unix.Unmount("/old", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("drop host root: %w", err)
	}
	if err := unix.Rmdir("/old"); err != nil {
		return fmt.Errorf("drop host root: %w", err)
	}
	in, err := unix.Open("/src", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open source: %w", err)
	}
	out, err := unix.Open("/dst", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open destination: %w", err)
	}
	if !since {
		_, err = copyTree(in, out)
		return err
	}
	index, err := copyTreeSince(in, out, "/src", base)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	if err := snapshot.WriteIndex(w, index); err != nil {
		return err
	}
	return w.Flush()
}
