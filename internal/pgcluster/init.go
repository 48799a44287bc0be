package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Init creates a cluster in dir with initdb unless dir already holds one (PG_VERSION exists), in
// which case it only checks the major version. A new cluster is built in a sibling directory and
// renamed into place, so a crash mid-initdb never leaves a half-made cluster that looks finished.
// Concurrent calls for the same dir, from any process, are serialized by a lock file beside it.
func Init(ctx context.Context, dir string) error {
	bins, err := lookBinaries()
	if err != nil {
		return err
	}
	r, err := currentRunner()
	if err != nil {
		return err
	}
	return initCluster(ctx, bins, r, dir)
}

func initCluster(ctx context.Context, bins binaries, r runner, dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("init cluster: %w", err)
	}
	if ok, err := initialized(dir); ok || err != nil {
		return err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("init cluster: %w", err)
	}
	lock, err := lockFile(dir+".lock", true)
	if err != nil {
		return fmt.Errorf("init cluster: %w", err)
	}
	defer lock.Close()
	// Someone else may have finished while we waited for the lock.
	if ok, err := initialized(dir); ok || err != nil {
		return err
	}

	target := dir + ".initdb"
	inPlace := false
	switch entries, err := os.ReadDir(dir); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("init cluster: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("init cluster: %s is neither empty nor a postgresql cluster", dir)
	default:
		// An existing empty directory may be a mount point that cannot be replaced by rename.
		target, inPlace = dir, true
	}
	if !inPlace {
		if err := os.RemoveAll(target); err != nil {
			return fmt.Errorf("init cluster: remove leftover %s: %w", target, err)
		}
		if err := os.Mkdir(target, 0o700); err != nil {
			return fmt.Errorf("init cluster: %w", err)
		}
	}
	if err := r.chown(target); err != nil {
		return fmt.Errorf("init cluster: %w", err)
	}

	cmd := r.forDir(target).command(bins.initdb,
		"--pgdata="+target,
		"--username="+Superuser,
		"--auth-local=trust",
		"--auth-host=scram-sha-256",
		"--encoding=UTF8",
		"--locale=C",
		"--no-instructions",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runContext(ctx, cmd); err != nil {
		if !inPlace {
			os.RemoveAll(target)
		}
		return fmt.Errorf("init cluster: initdb: %w: %s", err, strings.TrimSpace(out.String()))
	}
	if err := appendInclude(target); err != nil {
		return fmt.Errorf("init cluster: %w", err)
	}
	if inPlace {
		return nil
	}
	if err := os.Rename(target, dir); err != nil {
		return fmt.Errorf("init cluster: %w", err)
	}
	return syncDir(parent)
}

// initialized reports whether dir holds a cluster, and fails if it is not our major version:
// a 14 or 16 server would refuse the files with a far less helpful message.
func initialized(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "PG_VERSION"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("init cluster: %w", err)
	}
	if v := strings.TrimSpace(string(b)); v != MajorVersion {
		return false, fmt.Errorf("init cluster: %s holds a postgresql %s cluster, want %s", dir, v, MajorVersion)
	}
	return true, nil
}

// appendInclude makes postgresql.conf read the settings file Start rewrites on every start, last,
// so ours win over initdb's defaults while ALTER SYSTEM (postgresql.auto.conf) still wins over ours.
func appendInclude(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "\n# Added by cocoonbox: settings it writes before every start.\ninclude_if_exists = '%s'\n", confName)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// runContext runs cmd, killing it if ctx ends first.
func runContext(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
		return ctx.Err()
	}
}

// runtimeFiles are what a started cluster adds to its directory; Copy leaves them behind.
var runtimeFiles = map[string]bool{
	"postmaster.pid":  true,
	"postmaster.opts": true,
	lockName:          true,
	sockName:          true,
	logName:           true,
	logName + ".1":    true,
	passwordName:      true,
}

// Copy duplicates the stopped cluster in src into dst, which must not exist, owned by the account
// the server runs as. Tests use it to start many clusters from one initdb, which costs seconds.
func Copy(src, dst string) error {
	r, err := currentRunner()
	if err != nil {
		return err
	}
	if ok, err := initialized(src); err != nil || !ok {
		return fmt.Errorf("copy cluster: %s is not a cluster: %w", src, err)
	}
	if pid, err := runningPID(src); err != nil || pid != 0 {
		return fmt.Errorf("copy cluster: %s is in use by postgres pid %d: %w", src, pid, err)
	}
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if filepath.Dir(rel) == "." && runtimeFiles[rel] {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if err := copyFile(path, target, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil
		}
		return r.chown(target)
	})
	if err != nil {
		return fmt.Errorf("copy cluster: %w", err)
	}
	return nil
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
