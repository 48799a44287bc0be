// Package storetest gives every test its own migrated PostgreSQL database, so tests of code that
// uses the store run against the real server, in parallel, without seeing each other's rows.
//
// Each test binary runs one throwaway cluster. initdb takes seconds, so it runs once per machine
// into a golden directory under the user cache dir; a test binary copies that (a fraction of a
// second), starts it with fsync off, migrates a template database once, and then hands each test
// a CREATE DATABASE … TEMPLATE copy of it, which takes milliseconds.
//
// Cleanup: Main stops the cluster and removes its directory when the tests end, passed or failed.
// If the binary dies instead (a panic, a timeout, SIGKILL), the kernel stops the server because it
// runs as a direct child with a parent-death signal, and the directory, whose lock died with the
// binary, is removed by the next test binary that starts a cluster.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loomhand/cocoonbox/internal/pgcluster"
	"github.com/loomhand/cocoonbox/internal/store"
)

// Main runs the tests and then stops the cluster and removes it. Packages that use storetest call
// it from TestMain:
//
//	func TestMain(m *testing.M) { storetest.Main(m) }
func Main(m *testing.M) {
	mainRunning.Store(true)
	code := m.Run()
	shutdown()
	os.Exit(code)
}

// New returns a Store on a fresh database with the current schema, closed and dropped when the
// test ends.
func New(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// NewWithSQL is New with a plain connection to the same database, for a test that sets up what
// the store's methods do not (a heartbeat in the past, a row as an attacker would copy it); both
// close when the test ends.
func NewWithSQL(t testing.TB) (*store.Store, *pgx.Conn) {
	t.Helper()
	url := URL(t)
	st, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return st, conn
}

// URL returns the URL of a fresh database with the current schema, for tests that open the store
// themselves; the database is dropped when the test ends.
func URL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, templateDB)
}

// EmptyURL returns the URL of a fresh database with no schema at all, for migration tests; it is
// dropped when the test ends.
func EmptyURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, "")
}

const (
	// templateDB holds the migrated schema every test database is copied from.
	templateDB = "cbx_template"
	// runPrefix names the per-binary directories under os.TempDir(), so sweep finds them.
	runPrefix = "cocoonbox-pgtest-"
)

var (
	mainRunning atomic.Bool
	seq         atomic.Int64

	mu        sync.Mutex
	shared    *cluster
	sharedErr error
)

// cluster is this test binary's server and the directory it lives in.
type cluster struct {
	dir  string
	lock *os.File // held while the binary lives; see sweep
	pg   *pgcluster.Cluster
}

func newDatabase(t testing.TB, template string) string {
	t.Helper()
	if !mainRunning.Load() {
		t.Fatal("storetest: the package's TestMain must call storetest.Main(m), which stops the cluster")
	}
	c, err := get()
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("test_%d", seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.pg.CreateDatabase(ctx, name, template); err != nil {
		t.Fatalf("storetest: %v", err)
	}
	t.Cleanup(func() {
		// Dropping keeps a long package's cluster small; each copy costs a few megabytes.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.pg.DropDatabase(ctx, name); err != nil {
			t.Errorf("storetest: %v", err)
		}
	})
	return c.pg.URL(name)
}

// get starts the binary's cluster on first use; a failure is remembered so every later test
// fails at once with the same reason instead of retrying a slow setup.
func get() (*cluster, error) {
	mu.Lock()
	defer mu.Unlock()
	if shared == nil && sharedErr == nil {
		shared, sharedErr = setup()
	}
	return shared, sharedErr
}

func setup() (c *cluster, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	golden, err := goldenDir()
	if err != nil {
		return nil, err
	}
	// Init is idempotent and serialized across processes, so parallel packages share one initdb.
	if err := pgcluster.Init(ctx, golden); err != nil {
		return nil, fmt.Errorf("storetest: %w", err)
	}
	sweep()

	dir, err := os.MkdirTemp("", runPrefix)
	if err != nil {
		return nil, fmt.Errorf("storetest: %w", err)
	}
	c = &cluster{dir: dir}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	// Traversable by the postgres user when tests run as root, so the server needs no capability.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, fmt.Errorf("storetest: %w", err)
	}
	if c.lock, err = lock(filepath.Join(dir, "lock"), true); err != nil {
		return nil, fmt.Errorf("storetest: %w", err)
	}
	data := filepath.Join(dir, "data")
	if err := pgcluster.Copy(golden, data); err != nil {
		return nil, fmt.Errorf("storetest: %w", err)
	}
	c.pg, err = pgcluster.Start(ctx, pgcluster.Options{Dir: data, NoSync: true, DieWithParent: true})
	if err != nil {
		return nil, fmt.Errorf("storetest: %w", err)
	}
	if err := c.pg.CreateDatabase(ctx, templateDB, ""); err != nil {
		return nil, fmt.Errorf("storetest: %w", err)
	}
	st, err := store.Open(ctx, c.pg.URL(templateDB))
	if err != nil {
		return nil, fmt.Errorf("storetest: migrate template: %w", err)
	}
	st.Close()
	return c, nil
}

// goldenDir is keyed by the major version and pgcluster's InitFormat, so a change to either makes
// a new golden copy instead of reusing an incompatible one.
func goldenDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("storetest: %w", err)
	}
	return filepath.Join(cache, "cocoonbox", "pg-golden-"+pgcluster.MajorVersion+"-"+pgcluster.InitFormat), nil
}

func shutdown() {
	mu.Lock()
	defer mu.Unlock()
	if shared != nil {
		if err := shared.close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		shared = nil
	}
}

func (c *cluster) close() error {
	var errs []error
	if c.pg != nil {
		errs = append(errs, c.pg.Stop())
	}
	errs = append(errs, os.RemoveAll(c.dir))
	if c.lock != nil {
		c.lock.Close()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("storetest: clean up %s: %w", c.dir, err)
	}
	return nil
}

// sweep removes the directories of earlier test binaries that died without cleaning up: those
// whose lock no live process holds. A directory without a lock file is only removed once it is a
// minute old, since its binary may be between creating it and locking it.
func sweep() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), runPrefix+"*"))
	for _, dir := range dirs {
		fi, err := os.Lstat(dir)
		if err != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		f, err := lock(filepath.Join(dir, "lock"), false)
		switch {
		case err == nil:
			os.RemoveAll(dir)
			f.Close()
		case errors.Is(err, os.ErrNotExist) && time.Since(fi.ModTime()) > time.Minute:
			os.RemoveAll(dir)
		}
	}
}

// lock takes an exclusive flock on path, held until the file is closed or the process dies; with
// create false, a missing file is an error rather than a new lock.
func lock(path string, create bool) (*os.File, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
