package pgcluster

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// capDacReadSearch is CAP_DAC_READ_SEARCH from linux/capability.h: it bypasses read and search
// permission checks on directories, which is exactly what lets the postgres user walk through
// /root (mode 700) to its own data directory without loosening /root for everyone.
const capDacReadSearch = 2

func (r runner) sysProcAttr() *syscall.SysProcAttr {
	if !r.asPostgres {
		return &syscall.SysProcAttr{}
	}
	attr := &syscall.SysProcAttr{
		// An empty Groups list drops root's supplementary groups in the child.
		Credential: &syscall.Credential{Uid: uint32(r.uid), Gid: uint32(r.gid), Groups: []uint32{}},
	}
	if r.traverse {
		// Ambient capabilities survive the setuid and the execs of pg_ctl → sh → postgres, and are
		// inherited by every backend; they grant nothing beyond directory search and file read.
		attr.AmbientCaps = []uintptr{capDacReadSearch}
	}
	return attr
}

// dieWithParent makes the kernel send SIGQUIT (postgres' immediate shutdown, which also stops
// its backends) to the child when the thread that started it exits. The caller must start the
// child from a goroutine locked to its OS thread for as long as the child runs. The child gets
// its own process group so a Ctrl-C at the terminal reaches only us, and we stop it in order.
func dieWithParent(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGQUIT
	attr.Setpgid = true
}

// isServer reports whether pid is a live postgres process working in dir. Checking more than
// that the pid exists matters after a reboot or in a container, where a stale postmaster.pid
// commonly names a pid that now belongs to something else, possibly another cluster's postgres,
// which must never be signalled. A zombie is not live. When the working directory cannot be read
// (another user's process, without root) the command name has to do.
func isServer(pid int, dir string) bool {
	comm, state, ok := procStat(pid)
	if !ok || comm != "postgres" || state == 'Z' || state == 'X' {
		return false
	}
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return true
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return cwd == dir
}

// isZombie reports whether pid has exited but was not reaped yet. postgres' own lock-file check
// takes such a pid for a live server, and some container init processes reap only every second
// or so, so a start right after a crash must wait for it.
func isZombie(pid int) bool {
	_, state, ok := procStat(pid)
	return ok && state == 'Z'
}

// procStat reads the command name and state from /proc/<pid>/stat: "pid (comm) state ...".
func procStat(pid int) (comm string, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	// comm may itself contain ") ", so split at the last one.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndex(b, []byte(") "))
	if open < 0 || end < open || len(b) < end+3 {
		return "", 0, false
	}
	return string(b[open+1 : end]), b[end+2], true
}

// serverProcesses lists the live postgres processes working in dir: a server's postmaster and
// its backends, which outlive a SIGKILLed postmaster until they notice it is gone, holding its
// shared memory meanwhile.
func serverProcesses(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && isServer(pid, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}
