package pgcluster

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// runner starts the server programs as the account that must own the cluster files. initdb and
// postgres refuse to run as root, so under root that account is the postgres system user.
type runner struct {
	uid, gid int
	// asPostgres is set when this process is root and children switch to the postgres user.
	asPostgres bool
	// traverse is set when that user cannot reach the cluster directory on its own (a cluster
	// under /root, mode 700): children then get CAP_DAC_READ_SEARCH as an ambient capability.
	traverse bool
}

func currentRunner() (runner, error) {
	if os.Geteuid() != 0 {
		return runner{uid: os.Geteuid(), gid: os.Getegid()}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return runner{}, fmt.Errorf("look up postgres user (postgresql refuses to run as root; `make deps` creates the account): %w", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return runner{}, fmt.Errorf("parse postgres uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return runner{}, fmt.Errorf("parse postgres gid %q: %w", u.Gid, err)
	}
	return runner{uid: uid, gid: gid, asPostgres: true}, nil
}

// forDir returns the runner to use for a cluster in dir: it asks for the traversal capability only
// when the postgres user could not otherwise reach dir, so clusters in world-traversable places
// (the test clusters under /tmp) run without any extra privilege.
func (r runner) forDir(dir string) runner {
	if !r.asPostgres {
		return r
	}
	r.traverse = !canTraverse(dir, r.uid, r.gid)
	if !r.traverse {
		if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
			r.traverse = !canTraverse(real, r.uid, r.gid)
		}
	}
	return r
}

// command prepares name to run as the cluster's user with a clean environment: inherited PG*
// variables (PGDATA, PGPORT, PGHOST) would silently point pg_ctl elsewhere, and LC_ALL=C keeps
// server messages in the English we quote in errors.
func (r runner) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	env := []string{"LC_ALL=C"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "LC_") && !strings.HasPrefix(kv, "LANG") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	// The caller's working directory may be one the postgres user cannot enter.
	cmd.Dir = "/"
	cmd.SysProcAttr = r.sysProcAttr()
	return cmd
}

// chown hands path to the cluster's user; a no-op unless we switch users.
func (r runner) chown(path string) error {
	if !r.asPostgres {
		return nil
	}
	if err := os.Lchown(path, r.uid, r.gid); err != nil {
		return fmt.Errorf("chown %s to postgres: %w", path, err)
	}
	return nil
}

// canTraverse reports whether uid/gid may search every ancestor of dir, following the kernel's
// rule that the owner bits alone apply to the owner and the group bits alone to the group. ACLs
// are ignored, which can only make us ask for the capability when it was not strictly needed.
func canTraverse(dir string, uid, gid int) bool {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return false
		}
		owner, group, ok := fileOwner(fi)
		if !ok {
			return false
		}
		perm := fi.Mode().Perm()
		var allowed bool
		switch {
		case owner == uid:
			allowed = perm&0o100 != 0
		case group == gid:
			allowed = perm&0o010 != 0
		default:
			allowed = perm&0o001 != 0
		}
		if !allowed {
			return false
		}
		if p == filepath.Dir(p) {
			return true
		}
	}
}

func fileOwner(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
