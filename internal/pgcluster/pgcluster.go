// Package pgcluster runs a private PostgreSQL 15 cluster on this machine, so `cocoonbox dev` has
// its database without any setup and tests get a real, throwaway server. It drives the stock
// server programs (initdb, pg_ctl, postgres) and imports nothing heavy, so the test harness that
// uses it stays quick to build.
//
// Clusters listen on a unix socket in a private directory with trust authentication: the
// directory's permissions are the access control. A loopback TCP port is optional and always
// needs a password. Under root the server runs as the postgres system user, because postgres
// refuses root; see runner for how that user reaches a cluster under /root.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Superuser is the role initdb creates; clients on the unix socket log in as it without a password.
const Superuser = "cocoonbox"

// MajorVersion is the PostgreSQL major version clusters are created with and checked against.
const MajorVersion = "15"

// InitFormat changes whenever Init would produce a different cluster, so a cache of Init's output
// (storetest's golden copy) can be keyed by it.
const InitFormat = "1"

// Names inside the cluster directory. The data directory is the cluster directory: everything
// that belongs to a cluster lives in one place and goes away with it.
const (
	confName     = "cocoonbox.conf"
	lockName     = "cocoonbox.lock"
	passwordName = "cocoonbox.password"
	logName      = "postgres.log"
	sockName     = "sock"
)

// defaultPort only names the socket file (.s.PGSQL.5432) when there is no TCP listener; the socket
// directory is private, so clusters never collide on it.
const defaultPort = 5432

// maxSocketPath is sizeof(sockaddr_un.sun_path) minus the terminating NUL on Linux.
const maxSocketPath = 107

// Options configure Start.
type Options struct {
	// Dir is the cluster (data) directory; Start initializes it when it holds no cluster yet.
	Dir string
	// Database, if set, is created when missing, so the application can connect at once.
	Database string
	// Port, when positive, adds a listener on 127.0.0.1:Port that requires the password TCPURL
	// carries. The unix socket is always on.
	Port int
	// NoSync turns off fsync, synchronous commit and full page writes. Much faster, but a machine
	// crash can corrupt the cluster: for test clusters only.
	NoSync bool
	// DieWithParent runs postgres as a direct child that the kernel stops (SIGQUIT) when this
	// process dies however it dies, instead of as a daemon started by pg_ctl that outlives us.
	// Tests use it so a killed or panicking test binary leaves no server behind.
	DieWithParent bool
	// StartTimeout bounds the wait for the server to accept connections; zero means a minute.
	StartTimeout time.Duration
}

// Cluster is a running server. Its methods are safe for concurrent use.
type Cluster struct {
	dir      string
	sockDir  string
	tmpSock  bool // sockDir was made under os.TempDir() because dir is too deep for a socket path
	port     int
	password string // set when listening on TCP
	bins     binaries
	run      runner
	lock     *os.File

	opts Options // what Start was given, for Restart
	// proc is the server process in DieWithParent mode (nil otherwise), replaced by Restart.
	proc atomic.Pointer[serverProc]

	adminMu sync.Mutex
	admin   *pgx.Conn

	stopOnce sync.Once
	stopErr  error
}

// Start initializes the cluster in opts.Dir if needed and starts it, waiting until it accepts
// connections.
//
// A cluster whose previous server was SIGKILLed starts normally: postgres discards a
// postmaster.pid whose pid is dead (after checking no old backend still holds its shared memory;
// Start first waits for those backends to notice and exit), and Start removes one whose pid now
// belongs to another program (checked by name and working directory, so a reused pid is never
// signalled). A server still running from a
// parent that crashed (its lock is free) is stopped with a fast shutdown and started again, rather
// than adopted, so this call's Options always apply and this process owns the server. A server
// whose parent is alive (the lock is held) is an error: two owners of one cluster is a bug.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("start postgresql: options: Dir is empty")
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("start postgresql: options: Port %d out of range", opts.Port)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("start postgresql: %w", err)
	}
	bins, err := lookBinaries()
	if err != nil {
		return nil, err
	}
	r, err := currentRunner()
	if err != nil {
		return nil, err
	}
	if err := initCluster(ctx, bins, r, dir); err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, port: defaultPort, bins: bins, run: r.forDir(dir), opts: opts}
	if opts.Port > 0 {
		c.port = opts.Port
	}
	c.lock, err = lockFile(filepath.Join(dir, lockName), false)
	if errors.Is(err, errLocked) {
		return nil, fmt.Errorf("start postgresql: cluster %s is in use by another process", dir)
	}
	if err != nil {
		return nil, fmt.Errorf("start postgresql: %w", err)
	}
	if err := c.start(ctx, opts); err != nil {
		c.cleanup()
		return nil, fmt.Errorf("start postgresql: %w", err)
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, opts Options) error {
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	if err := c.stopLeftover(ctx); err != nil {
		return err
	}
	if opts.Port > 0 {
		pw, err := c.ensurePassword()
		if err != nil {
			return err
		}
		c.password = pw
	}
	if err := c.prepareSocketDir(); err != nil {
		return err
	}
	if err := c.writeConfig(opts); err != nil {
		return err
	}
	logf, err := c.openLog()
	if err != nil {
		return err
	}
	if opts.DieWithParent {
		err = c.startChild(ctx, logf)
	} else {
		logf.Close()
		err = c.startDaemon(ctx)
	}
	if err != nil {
		return err
	}
	if c.password != "" {
		// Set on every start so the role always matches the file, even after a restore.
		if err := c.exec(ctx, "ALTER ROLE "+pgx.Identifier{Superuser}.Sanitize()+" PASSWORD "+quote(c.password)); err != nil {
			c.shutdown()
			return fmt.Errorf("set password: %w", err)
		}
	}
	if opts.Database != "" {
		if err := c.ensureDatabase(ctx, opts.Database); err != nil {
			c.shutdown()
			return err
		}
	}
	return nil
}

// stopLeftover deals with the postmaster.pid of an earlier run; see Start.
func (c *Cluster) stopLeftover(ctx context.Context) error {
	pf, ok, err := readPIDFile(c.dir)
	if err != nil || !ok {
		return err
	}
	if !isServer(pf.pid, c.dir) {
		if err := waitReaped(ctx, pf.pid); err != nil {
			return err
		}
		if err := waitBackendsGone(ctx, c.dir); err != nil {
			return err
		}
		if processExists(pf.pid) {
			// postgres would refuse to start, taking the unrelated process for a live server. The
			// socket lock in our private socket directory names the same pid.
			stale, _ := filepath.Glob(filepath.Join(c.dir, sockName, ".s.PGSQL.*"))
			for _, path := range append(stale, filepath.Join(c.dir, "postmaster.pid")) {
				if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("remove stale lock file: %w", err)
				}
			}
		}
		c.removeOldSocketDir(pf.sockDir)
		return nil
	}
	if err := c.pgctlStop(ctx, "fast"); err != nil {
		return fmt.Errorf("stop server left running (pid %d): %w", pf.pid, err)
	}
	c.removeOldSocketDir(pf.sockDir)
	return nil
}

// backendsGrace bounds the wait for the backends of a server that was killed: each leaves when
// it notices its postmaster gone, usually within milliseconds, later on a loaded machine.
const backendsGrace = 30 * time.Second

// waitBackendsGone waits until no postgres process works in dir. The backends of a killed
// postmaster hold its shared memory until they exit, and postgres refuses to start beside them
// ("pre-existing shared memory block is still in use").
func waitBackendsGone(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, backendsGrace)
	defer cancel()
	for {
		pids := serverProcesses(dir)
		if len(pids) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres processes %v of the previous server of %s are still running: stop them", pids, dir)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// removeOldSocketDir removes a short socket directory an earlier run made under os.TempDir().
func (c *Cluster) removeOldSocketDir(dir string) {
	if dir != "" && dir != c.sockDir && filepath.Dir(dir) == filepath.Clean(os.TempDir()) && strings.HasPrefix(filepath.Base(dir), tmpSockPrefix) {
		os.RemoveAll(dir)
	}
}

const tmpSockPrefix = "cocoonbox-pgsock-"

func (c *Cluster) prepareSocketDir() error {
	if c.tmpSock {
		return nil // a restart keeps the directory, and with it the URL clients hold
	}
	suffix := len("/.s.PGSQL.") + len(strconv.Itoa(c.port))
	dir := filepath.Join(c.dir, sockName)
	if len(dir)+suffix <= maxSocketPath {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("make socket dir: %w", err)
		}
		c.sockDir = dir
		return c.run.chown(dir)
	}
	dir, err := os.MkdirTemp("", tmpSockPrefix)
	if err != nil {
		return fmt.Errorf("make socket dir: %w", err)
	}
	c.sockDir, c.tmpSock = dir, true
	if len(dir)+suffix > maxSocketPath {
		return fmt.Errorf("make socket dir: %s is too long for a unix socket path", dir)
	}
	return c.run.chown(dir)
}

// writeConfig rewrites the settings file postgresql.conf includes, so what Options say is what
// runs, without editing initdb's file or the one ALTER SYSTEM owns.
func (c *Cluster) writeConfig(opts Options) error {
	var b strings.Builder
	b.WriteString("# Written by cocoonbox before every start: edits are lost. Use ALTER SYSTEM instead.\n")
	listen := ""
	if opts.Port > 0 {
		listen = "127.0.0.1"
	}
	fmt.Fprintf(&b, "listen_addresses = %s\n", quote(listen))
	fmt.Fprintf(&b, "port = %d\n", c.port)
	fmt.Fprintf(&b, "unix_socket_directories = %s\n", quote(c.sockDir))
	b.WriteString("unix_socket_permissions = 0700\n")
	if opts.NoSync {
		b.WriteString("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
	}
	path := filepath.Join(c.dir, confName)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", confName, err)
	}
	return c.run.chown(path)
}

// quote makes a string literal for postgresql.conf and for SQL alike (standard_conforming_strings
// is on), where utility statements such as ALTER ROLE take no parameters.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// openLog keeps the previous run's log as postgres.log.1, which is where the reason for a crash
// is, and opens a fresh one owned by the server's user.
func (c *Cluster) openLog() (*os.File, error) {
	path := filepath.Join(c.dir, logName)
	if err := os.Rename(path, path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("rotate log: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	if err := c.run.chown(path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// logTail is the end of the server log, for errors: that is where postgres explains itself.
func (c *Cluster) logTail() string {
	b, err := os.ReadFile(filepath.Join(c.dir, logName))
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// URL returns a pgx connection URL for dbname over the unix socket, as the superuser.
func (c *Cluster) URL(dbname string) string {
	q := url.Values{"host": {c.sockDir}, "port": {strconv.Itoa(c.port)}, "sslmode": {"disable"}}
	u := url.URL{Scheme: "postgres", User: url.User(Superuser), Path: "/" + dbname, RawQuery: q.Encode()}
	return u.String()
}

// TCPURL returns a connection URL for dbname over loopback TCP with the superuser's password, or
// "" when Options.Port was not set. The password is kept in the cluster directory, readable only
// by the user that started it.
func (c *Cluster) TCPURL(dbname string) string {
	if c.password == "" {
		return ""
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(Superuser, c.password),
		Host:     "127.0.0.1:" + strconv.Itoa(c.port),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// LogFile returns the path of the server log, for messages that tell people where to look.
func (c *Cluster) LogFile() string { return filepath.Join(c.dir, logName) }

// Check reports whether the server is up and answering queries.
func (c *Cluster) Check(ctx context.Context) error {
	if p := c.proc.Load(); p != nil {
		select {
		case <-p.exited:
			return fmt.Errorf("check postgresql: server exited: %v", p.err)
		default:
		}
	}
	if err := c.exec(ctx, "SELECT 1"); err != nil {
		return fmt.Errorf("check postgresql: %w", err)
	}
	return nil
}

// Stop shuts the server down with a fast shutdown (open transactions roll back, data is kept) and
// releases the cluster. Calling it again returns the first result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.stopErr = c.shutdown()
		c.cleanup()
	})
	return c.stopErr
}

func (c *Cluster) shutdown() error {
	c.closeAdmin()
	if p := c.proc.Load(); p != nil {
		return p.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.pgctlStop(ctx, "fast"); err != nil {
		return fmt.Errorf("stop postgresql: %w", err)
	}
	return nil
}

// cleanup releases what Start acquired besides the server itself.
func (c *Cluster) cleanup() {
	c.closeAdmin()
	if c.tmpSock {
		os.RemoveAll(c.sockDir)
	}
	if c.lock != nil {
		c.lock.Close()
	}
}
