package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// ErrNotInstalled is returned when no PostgreSQL 15 server binaries can be found.
var ErrNotInstalled = errors.New("postgresql 15 not found (initdb, pg_ctl): run `make deps`")

// binaries are the server programs of one installation; they must come from the same directory
// because initdb and pg_ctl find postgres next to themselves anyway.
type binaries struct {
	initdb, pgctl, postgres string
}

// debianBinDir is where Debian's postgresql-15 package puts the server binaries, which are not on
// PATH there (only the version-switching wrappers are).
const debianBinDir = "/usr/lib/postgresql/" + MajorVersion + "/bin"

// lookBinaries caches the search: it may run pg_config and postgres --version.
var lookBinaries = sync.OnceValues(func() (binaries, error) { return findBinaries(debianBinDir) })

// findBinaries tries the preferred directory, then pg_config's bindir, then PATH, accepting a
// directory only if it holds all three programs and, outside the preferred one, reports version 15.
func findBinaries(preferred string) (binaries, error) {
	if b, ok := binariesIn(preferred); ok {
		return b, nil
	}
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.Command(pgConfig, "--bindir").Output(); err == nil {
			if b, ok := binariesIn(strings.TrimSpace(string(out))); ok && isMajor(b.postgres) {
				return b, nil
			}
		}
	}
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if b, ok := binariesIn(filepath.Dir(initdb)); ok && isMajor(b.postgres) {
			return b, nil
		}
	}
	return binaries{}, ErrNotInstalled
}

func binariesIn(dir string) (binaries, bool) {
	if dir == "" {
		return binaries{}, false
	}
	b := binaries{
		initdb:   filepath.Join(dir, "initdb"),
		pgctl:    filepath.Join(dir, "pg_ctl"),
		postgres: filepath.Join(dir, "postgres"),
	}
	for _, p := range []string{b.initdb, b.pgctl, b.postgres} {
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return binaries{}, false
		}
	}
	return b, true
}

// isMajor reports whether postgres --version ("postgres (PostgreSQL) 15.18 (Debian ...)") is ours.
func isMajor(postgres string) bool {
	out, err := exec.Command(postgres, "--version").Output()
	if err != nil {
		return false
	}
	_, v, ok := strings.Cut(string(out), ") ")
	return ok && strings.HasPrefix(v, MajorVersion+".")
}

// ClientTool returns the path of PostgreSQL's client program name (pg_dump, pg_restore) from the
// installation the server programs come from, so a dump is read by the same major version that
// wrote it.
func ClientTool(name string) (string, error) {
	b, err := lookBinaries()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(b.postgres), name)
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s not found beside %s: run `make deps`", name, b.postgres)
	}
	return p, nil
}
