// Command probe tries, from inside a box, what a box must not be able to do to its host, and
// prints one "name=result" line per attempt: "ok" when the kernel allowed it, else the error.
// Nothing it tries changes the host even where it is allowed: files are only opened, never
// written, and the syscalls get arguments the kernel rejects after its permission checks.
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"unsafe"
)

func errno(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := err.(syscall.Errno); ok {
		return errnoName(e)
	}
	if pe, ok := err.(*os.PathError); ok {
		return errno(pe.Err)
	}
	return err.Error()
}

func errnoName(e syscall.Errno) string {
	switch e {
	case 0:
		return "ok"
	case syscall.EPERM:
		return "EPERM"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EROFS:
		return "EROFS"
	case syscall.ENOSYS:
		return "ENOSYS"
	case syscall.ENOENT:
		return "ENOENT"
	}
	return fmt.Sprintf("errno %d (%v)", int(e), e)
}

func openFor(path string, flag int) string {
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return errno(err)
	}
	defer f.Close()
	if flag != os.O_RDONLY {
		return "ok"
	}
	b := make([]byte, 64)
	n, err := f.Read(b)
	if n == 0 {
		return "empty"
	}
	return fmt.Sprintf("read %d bytes (%v)", n, err)
}

func main() {
	empty := []byte{0}
	results := []struct{ name, res string }{
		{"write_core_pattern", openFor("/proc/sys/kernel/core_pattern", os.O_WRONLY)},
		{"write_sysrq_trigger", openFor("/proc/sysrq-trigger", os.O_WRONLY)},
		{"read_kcore", openFor("/proc/kcore", os.O_RDONLY)},
		{"read_keys", openFor("/proc/keys", os.O_RDONLY)},
		// A bad descriptor: where loading is allowed the kernel answers EBADF.
		{"finit_module", func() string {
			_, _, e := syscall.Syscall(313 /* SYS_FINIT_MODULE on amd64 */, ^uintptr(0), uintptr(unsafe.Pointer(&empty[0])), 0)
			return errnoName(e)
		}()},
		// A null attribute: where bpf is allowed the kernel answers EFAULT or EINVAL.
		{"bpf", func() string {
			_, _, e := syscall.Syscall(321 /* SYS_BPF on amd64 */, 0, 0, 0)
			return errnoName(e)
		}()},
		{"mount_tmpfs", errno(syscall.Mount("none", "/mnt", "tmpfs", 0, ""))},
		{"unshare_user", func() string {
			_, _, e := syscall.RawSyscall(syscall.SYS_UNSHARE, syscall.CLONE_NEWUSER, 0, 0)
			return errnoName(e)
		}()},
		{"keyctl", func() string {
			_, _, e := syscall.Syscall(syscall.SYS_KEYCTL, 0 /* KEYCTL_GET_KEYRING_ID */, ^uintptr(0), 0)
			return errnoName(e)
		}()},
		{"uid_map", func() string {
			b, err := os.ReadFile("/proc/self/uid_map")
			if err != nil {
				return errno(err)
			}
			return strings.Join(strings.Fields(string(b)), " ")
		}()},
	}
	for _, r := range results {
		fmt.Printf("%s=%s\n", r.name, r.res)
	}
}
