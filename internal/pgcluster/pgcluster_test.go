package pgcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

// sharedDir holds one initdb result that tests copy, so the suite pays for initdb once. It is
// mode 700 and owned by whoever runs the tests: under root the postgres user cannot traverse it,
// exactly like /root, so every cluster below it exercises the traversal capability.
var (
	sharedDir  string
	initOnce   sync.Once
	initErr    error
	helperMode = os.Getenv("PGCLUSTER_TEST_HELPER")
)

func TestMain(m *testing.M) {
	if helperMode != "" {
		runHelper()
		return
	}
	dir, err := os.MkdirTemp("", "pgcluster-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sharedDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// newDir returns a fresh cluster directory holding a copy of the shared template.
func newDir(t *testing.T) string {
	t.Helper()
	return copyTemplate(t, filepath.Join(sharedDir, strings.ReplaceAll(t.Name(), "/", "_")))
}

func copyTemplate(t *testing.T, dir string) string {
	t.Helper()
	initOnce.Do(func() {
		initErr = Init(context.Background(), filepath.Join(sharedDir, "template"))
	})
	if initErr != nil {
		t.Fatal(initErr)
	}
	if err := Copy(filepath.Join(sharedDir, "template"), dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func start(t *testing.T, opts Options) *Cluster {
	t.Helper()
	c, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestRestartKeepsData(t *testing.T) {
	ctx := context.Background()
	dir := newDir(t)
	if err := Init(ctx, dir); err != nil {
		t.Fatalf("second Init: %v", err)
	}
	c, err := Start(ctx, Options{Dir: dir, Database: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.URL("app"), "postgres://cocoonbox@/app?") {
		t.Errorf("URL = %q", c.URL("app"))
	}
	conn, err := pgx.Connect(ctx, c.URL("app"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('hello')"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := c.Check(ctx); err == nil {
		t.Error("Check after Stop succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "postgres.log")); err != nil {
		t.Errorf("server log: %v", err)
	}

	c = start(t, Options{Dir: dir, Database: "app"})
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := connect(t, c.URL("app")).QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != "hello" {
		t.Fatalf("after restart: %q, %v", v, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "postgres.log.1")); err != nil {
		t.Errorf("previous log kept: %v", err)
	}
	var fsync string
	if err := connect(t, c.URL("app")).QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil || fsync != "on" {
		t.Errorf("fsync = %q, %v; want on without NoSync", fsync, err)
	}
}

// startKillable starts a daemon cluster in dir and returns it with its postmaster's pid.
func startKillable(t *testing.T, dir string) (*Cluster, int) {
	t.Helper()
	c, err := Start(context.Background(), Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	pid, err := runningPID(dir)
	if err != nil || pid == 0 {
		t.Fatalf("running pid: %d, %v", pid, err)
	}
	return c, pid
}

// lockFilesNameOther makes both lock files of the dead server in dir name a live process of
// another program, as after a reboot (postgres ignores other users' pids: kill(pid, 0) fails
// with EPERM, so the process runs as the server's user).
func lockFilesNameOther(t *testing.T, c *Cluster, dir string) {
	t.Helper()
	other := c.run.command("/bin/sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	for _, name := range []string{"postmaster.pid", "sock/.s.PGSQL.5432.lock"} {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(string(b), "\n")
		if err := os.WriteFile(path, []byte(strconv.Itoa(other.Process.Pid)+"\n"+rest), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStartAfterKill covers the postmaster.pid a SIGKILLed server leaves, and one whose pid now
// belongs to an unrelated process (after a reboot).
func TestStartAfterKill(t *testing.T) {
	ctx := context.Background()
	dir := newDir(t)
	c, pid := startKillable(t, dir)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.cleanup() // as if this process had crashed too: the lock goes, the server is not stopped
	testutil.Eventually(t, testutil.WaitShort, "the server to be gone", func() bool { return !isServer(pid, dir) })

	c = start(t, Options{Dir: dir, NoSync: true})
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}

	// After a reboot the pid in both lock files may belong to some other live process.
	c, pid = startKillable(t, dir)
	syscall.Kill(pid, syscall.SIGKILL)
	c.cleanup()
	testutil.Eventually(t, testutil.WaitShort, "the server to be gone", func() bool { return !isServer(pid, dir) })
	lockFilesNameOther(t, c, dir)
	c = start(t, Options{Dir: dir, NoSync: true, DieWithParent: true})
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStartAfterKillWaitsForBackends: the processes of a SIGKILLed postmaster (its checkpointer,
// writers, launchers, backends) hold its shared memory until they notice it is gone, and a
// postgres started meanwhile, whose lock files Start had to remove, refuses to start beside them
// ("pre-existing shared memory block is still in use"; seen in CI on a loaded machine).
// Processes kept from noticing (stopped) for a second must delay the next Start, not fail it.
func TestStartAfterKillWaitsForBackends(t *testing.T) {
	ctx := context.Background()
	dir := newDir(t)
	c, pid := startKillable(t, dir)
	children := slices.DeleteFunc(serverProcesses(dir), func(p int) bool { return p == pid })
	if len(children) == 0 {
		t.Fatal("the server has no processes besides its postmaster")
	}
	for _, p := range children {
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	resume := func() {
		for _, p := range children {
			_ = syscall.Kill(p, syscall.SIGCONT) // each notices the postmaster is gone and exits
		}
	}
	resumed := make(chan struct{})
	defer func() { resume(); <-resumed }()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.cleanup()
	testutil.Eventually(t, testutil.WaitShort, "the server to be gone", func() bool { return !isServer(pid, dir) })
	// As after a reboot, the lock files name a live process of another program, so Start removes
	// them, and postgres no longer knows the old segment: only its key colliding tells it apart.
	lockFilesNameOther(t, c, dir)
	go func() {
		defer close(resumed)
		time.Sleep(time.Second)
		resume()
	}()

	c = start(t, Options{Dir: dir, NoSync: true})
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCrashedParent runs a helper process that starts a cluster and is then SIGKILLed, once with
// a pg_ctl daemon (left running: the next Start must take over) and once with DieWithParent (the
// server must go down with the helper).
func TestCrashedParent(t *testing.T) {
	for _, mode := range []string{"daemon", "child"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			dir := newDir(t)
			helper, serverPID := startHelper(t, mode, dir)

			if _, err := Start(ctx, Options{Dir: dir, NoSync: true}); err == nil || !strings.Contains(err.Error(), "in use by another process") {
				t.Fatalf("Start while helper runs: %v", err)
			}
			if err := helper.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			helper.Wait()

			if mode == "child" {
				testutil.Eventually(t, testutil.WaitShort, "the server to be gone", func() bool { return !isServer(serverPID, dir) })
			} else if !isServer(serverPID, dir) {
				t.Fatal("daemon died with its parent")
			}
			c := start(t, Options{Dir: dir, NoSync: true})
			testutil.Eventually(t, testutil.WaitShort, "the server to be gone", func() bool { return !isServer(serverPID, dir) })
			var n int
			if err := connect(t, c.URL("postgres")).QueryRow(ctx, "SELECT count(*) FROM helper_was_here").Scan(&n); err != nil || n != 1 {
				t.Fatalf("helper's data: %d, %v", n, err)
			}
		})
	}
}

// startHelper re-runs this test binary as a process that starts a cluster in dir, writes a row,
// reports the server's pid and waits to be killed.
func startHelper(t *testing.T, mode, dir string) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PGCLUSTER_TEST_HELPER="+mode, "PGCLUSTER_TEST_DIR="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "ready "))
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	return cmd, pid
}

func runHelper() {
	ctx := context.Background()
	dir := os.Getenv("PGCLUSTER_TEST_DIR")
	c, err := Start(ctx, Options{Dir: dir, NoSync: true, DieWithParent: helperMode == "child"})
	if err == nil {
		// synchronous_commit=on: NoSync would let the row die with the server it SIGQUITs.
		err = c.exec(ctx, "SET synchronous_commit = on; CREATE TABLE helper_was_here (); INSERT INTO helper_was_here DEFAULT VALUES")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	pid, _ := runningPID(dir)
	fmt.Printf("ready %d\n", pid)
	select {}
}

func TestLongPathUsesShortSocketDir(t *testing.T) {
	ctx := context.Background()
	deep := copyTemplate(t, filepath.Join(sharedDir, strings.Repeat("d", 100)))
	c := start(t, Options{Dir: deep, NoSync: true, DieWithParent: true})
	if !c.tmpSock || filepath.Dir(c.sockDir) != filepath.Clean(os.TempDir()) {
		t.Fatalf("socket dir %s for %s", c.sockDir, deep)
	}
	if err := c.Check(ctx); err != nil {
		t.Fatal(err)
	}
	sock := c.sockDir
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket dir %s left: %v", sock, err)
	}
}

func TestTCPNeedsPassword(t *testing.T) {
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	c := start(t, Options{Dir: newDir(t), Port: port, NoSync: true, DieWithParent: true})
	if c.TCPURL("postgres") == "" {
		t.Fatal("no TCP URL")
	}
	connect(t, c.TCPURL("postgres"))
	connect(t, c.URL("postgres"))
	bad := fmt.Sprintf("postgres://%s:wrong@127.0.0.1:%d/postgres?sslmode=disable", Superuser, port)
	if conn, err := pgx.Connect(ctx, bad); err == nil {
		conn.Close(ctx)
		t.Fatal("wrong password accepted over TCP")
	}
}

// TestTraversal checks when the postgres user gets CAP_DAC_READ_SEARCH: only for a directory it
// could not reach. Every other test already runs a cluster below a mode-700 root-owned directory.
func TestTraversal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root switches to the postgres user")
	}
	r, err := currentRunner()
	if err != nil {
		t.Fatal(err)
	}
	if !r.forDir(filepath.Join(sharedDir, "x")).traverse {
		t.Error("mode-700 parent: no traversal capability")
	}
	open := t.TempDir()
	for _, d := range []string{open, filepath.Dir(open)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if r.forDir(filepath.Join(open, "x")).traverse {
		t.Error("world-traversable parent: traversal capability granted")
	}

	// The real thing: a cluster in the home directory (/root, mode 700), left as it is.
	home, err := os.UserHomeDir()
	if err != nil || canTraverse(filepath.Join(home, "x"), r.uid, r.gid) {
		t.Skipf("home directory %q is traversable anyway", home)
	}
	dir, err := os.MkdirTemp(home, ".pgcluster-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // after the cluster's Stop, registered below
	c := start(t, Options{Dir: copyTemplate(t, filepath.Join(dir, "pg")), NoSync: true})
	if !c.run.traverse {
		t.Errorf("%s: no traversal capability", dir)
	}
	if err := c.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestInitRefuses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Init(ctx, dir); err == nil || !strings.Contains(err.Error(), "neither empty nor a postgresql cluster") {
		t.Errorf("Init of a non-empty dir: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "PG_VERSION"), []byte("16\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Init(ctx, dir); err == nil || !strings.Contains(err.Error(), "holds a postgresql 16 cluster, want 15") {
		t.Errorf("Init of a 16 cluster: %v", err)
	}
	if _, err := Start(ctx, Options{}); err == nil || !strings.Contains(err.Error(), "Dir is empty") {
		t.Errorf("Start without Dir: %v", err)
	}
}

func TestBinariesNotFound(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findBinaries(t.TempDir())
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("err = %v", err)
	}
	if want := "postgresql 15 not found (initdb, pg_ctl): run `make deps`"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	if _, err := lookBinaries(); err != nil {
		t.Errorf("installed binaries: %v", err)
	}
}

// TestRestartAfterCrash is what a supervisor does when the server dies under it: Done closes with
// the exit, Restart brings the server back with the data, on the same URL (also when the socket
// lives in a temporary directory because the cluster's path is long), and a connection opened
// again on that URL works.
func TestRestartAfterCrash(t *testing.T) {
	ctx := context.Background()
	for name, dir := range map[string]string{
		"short": newDir(t),
		"deep":  copyTemplate(t, filepath.Join(sharedDir, strings.Repeat("r", 100))),
	} {
		t.Run(name, func(t *testing.T) {
			// Not NoSync: with synchronous_commit off a commit just made may not be in the WAL yet.
			c := start(t, Options{Dir: dir, Database: "app", DieWithParent: true})
			url := c.URL("app")
			if _, err := connect(t, url).Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('hello')"); err != nil {
				t.Fatal(err)
			}
			if err := c.Restart(ctx); err == nil {
				t.Fatal("Restart of a running server succeeded")
			}
			if err := syscall.Kill(c.proc.Load().p.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			select {
			case <-c.Done():
			case <-time.After(testutil.WaitShort):
				t.Fatal("Done did not close after the server was killed")
			}
			if err := c.ExitError(); err == nil || !strings.Contains(err.Error(), "killed") {
				t.Errorf("ExitError = %v, want the kill", err)
			}
			if err := c.Check(ctx); err == nil {
				t.Error("Check of a dead server succeeded")
			}
			if err := c.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			if c.URL("app") != url {
				t.Errorf("URL changed across a restart: %s, then %s", url, c.URL("app"))
			}
			var v string
			if err := connect(t, url).QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != "hello" {
				t.Fatalf("after restart: %q, %v", v, err)
			}
			select {
			case <-c.Done():
				t.Fatal("Done of the restarted server is closed")
			default:
			}
		})
	}
}
