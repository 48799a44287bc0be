package devstack_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/vault"
)

// maxReported bounds the hits one scan reports: one leak usually shows in many events.
const maxReported = 20

// stackScan is the secret scan of one stack: the log files it and its worker processes write,
// and, once collected, the secrets it handled.
type stackScan struct {
	dir     string
	mu      sync.Mutex
	logs    map[string]string // what the file holds → its path
	secrets []secret
	workers int  // worker process logs
	swept   bool // secrets collected and histories scanned
	closed  bool // logs scanned
}

var (
	scansMu sync.Mutex
	scans   = map[string]*stackScan{} // by data dir, so a worker process of the stack logs into it
)

// newStackScan makes the scan of the stack about to start on data dir home, with its log file.
func newStackScan(t testing.TB, home string) (*stackScan, *slog.Logger) {
	t.Helper()
	sc := &stackScan{dir: t.TempDir(), logs: map[string]string{}}
	f := sc.logFile(t, "stack log")
	// The database server's own log (the previous start's in .1): a failed statement is logged
	// with its text.
	sc.logs["postgres log"] = filepath.Join(home, "postgres", "postgres.log")
	sc.logs["previous postgres log"] = filepath.Join(home, "postgres", "postgres.log.1")
	scansMu.Lock()
	scans[home] = sc
	scansMu.Unlock()
	return sc, slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// logFile creates a log file for what, scanned when the stack closes; the test's cleanup
// closes it.
func (sc *stackScan) logFile(t testing.TB, what string) *os.File {
	t.Helper()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	f, err := os.Create(filepath.Join(sc.dir, fmt.Sprintf("log-%d", len(sc.logs))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	sc.logs[what] = f.Name()
	return f
}

// scanned reports whether the stack on data dir home is scanned (startDev's; a benchmark's is not).
func scanned(home string) bool {
	scansMu.Lock()
	defer scansMu.Unlock()
	return scans[home] != nil
}

// workerLog is a log file for a worker process serving the stack on data dir home.
func workerLog(t testing.TB, home string) *os.File {
	scansMu.Lock()
	sc := scans[home]
	scansMu.Unlock()
	if sc == nil {
		t.Fatalf("secret scan: no stack on %s for this worker", home)
	}
	sc.mu.Lock()
	sc.workers++
	n := sc.workers
	sc.mu.Unlock()
	return sc.logFile(t, fmt.Sprintf("worker process %d log", n))
}

// closeDev closes a stack startDev started, after scanning it; a test that closes its stack
// itself must do it through closeDev, since the scan needs the stack running.
func closeDev(t testing.TB, d *devstack.Dev) error {
	t.Helper()
	scansMu.Lock()
	sc := scans[d.Home()]
	scansMu.Unlock()
	return sc.close(t, d)
}

// close scans the running stack's histories, closes the stack, then scans its logs (complete
// only once the stack has stopped). Calling it again only closes the stack again.
func (sc *stackScan) close(t testing.TB, d *devstack.Dev) error {
	t.Helper()
	if !sc.swept {
		sc.swept = true
		if d.Temporal == nil {
			t.Error("secret scan: the stack was closed before its scan; close it with closeDev")
		} else {
			sc.sweep(t, d)
		}
	}
	err := d.Close()
	if !sc.closed {
		sc.closed = true
		s := newScanner(sc.secrets)
		sc.mu.Lock()
		for what, path := range sc.logs {
			if err := s.scanLines(what, path); err != nil {
				t.Error(err)
			}
		}
		sc.mu.Unlock()
		report(t, s.hits)
		if t.Failed() {
			sc.tellWarnings(t)
		}
	}
	return err
}

// maxWarnings is how many of a failed test's stack warnings and errors it prints, the newest.
const maxWarnings = 30

// tellWarnings prints the newest warnings and errors of the stack's own logs, which a failed
// test's output otherwise lacks (the logs go with the test's temporary directory).
func (sc *stackScan) tellWarnings(t testing.TB) {
	t.Helper()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for what, path := range sc.logs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var lines []string
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
				lines = append(lines, strings.TrimSpace(line))
			}
		}
		if len(lines) > 0 {
			t.Logf("%s, its newest warnings and errors:\n%s", what, strings.Join(lines[max(0, len(lines)-maxWarnings):], "\n"))
		}
	}
}

// sweep collects the secrets of the running stack and scans its Temporal histories for them.
func (sc *stackScan) sweep(t testing.TB, d *devstack.Dev) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	secrets, err := stackSecrets(ctx, d)
	if err != nil {
		t.Errorf("secret scan: %v", err)
	}
	sc.secrets = secrets
	handled(secrets)
	s := newScanner(secrets)
	n, err := s.scanHistories(ctx, d.Temporal)
	if err != nil {
		t.Error(err)
	}
	report(t, s.hits)
	t.Logf("secret scan: %d secrets (%d encodings) in %d workflow histories, %s",
		len(secrets), len(s.needles), n, time.Since(start).Round(time.Millisecond))
}

// report fails t with each hit: kind, encoding and place, never the value.
func report(t testing.TB, hits []hit) {
	t.Helper()
	for i, h := range hits {
		if i == maxReported {
			t.Errorf("secret scan: and %d more", len(hits)-i)
			return
		}
		t.Errorf("secret scan: %s", h)
	}
}

// stackSecrets returns the secrets the running stack d handled: every value in its vault, every
// box's agent credential (derived as the activities derive it) and sandbox token (unsealed from
// the box rows with the stack's keyring, and from the engine's records), the engine's root
// token, the snapshot bucket's secret key and the dev user's API token.
func stackSecrets(ctx context.Context, d *devstack.Dev) ([]secret, error) {
	keys := devstack.Keyring(d)
	db, err := pgx.Connect(ctx, devstack.DatabaseURL(d))
	if err != nil {
		return nil, fmt.Errorf("connect to the store: %w", err)
	}
	defer db.Close(ctx)
	var out []secret

	rows, err := db.Query(ctx, `SELECT owner_id, name FROM secrets`)
	if err != nil {
		return nil, fmt.Errorf("list vault secrets: %w", err)
	}
	type ref struct{ owner, name string }
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ref, error) {
		var x ref
		err := r.Scan(&x.owner, &x.name)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("list vault secrets: %w", err)
	}
	v := &vault.Vault{Store: d.Store, Keys: keys}
	for _, r := range refs {
		val, err := v.Open(ctx, r.owner, r.name)
		if err != nil {
			return nil, fmt.Errorf("open vault secret %s of %s: %w", r.name, r.owner, err)
		}
		out = append(out, secret{"vault value", val})
	}

	rows, err = db.Query(ctx, `SELECT id, sandbox_token_ciphertext IS NOT NULL FROM boxes`)
	if err != nil {
		return nil, fmt.Errorf("list boxes: %w", err)
	}
	type box struct {
		id       string
		hasToken bool
	}
	boxes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (box, error) {
		var b box
		err := r.Scan(&b.id, &b.hasToken)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("list boxes: %w", err)
	}
	creds := boxlink.Credentials(keys)
	tokens := store.SandboxTokens{Store: d.Store, Keys: keys}
	for _, b := range boxes {
		c, err := creds(cocoonbox.BoxID(b.id))
		if err != nil {
			return nil, fmt.Errorf("agent credential of %s: %w", b.id, err)
		}
		out = append(out, secret{"agent credential", c})
		if !b.hasToken {
			continue
		}
		ref, err := tokens.SandboxToken(ctx, b.id)
		if errors.Is(err, store.ErrNotFound) { // deleted since the listing
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("sandbox token of %s: %w", b.id, err)
		}
		out = append(out, secret{"sandbox token", ref.Token})
	}

	url, root := d.Sandbox()
	out = append(out, secret{"engine root token", root})
	if root != "" {
		eng := sandbox.NewHTTP(url, root, &http.Client{Timeout: 30 * time.Second})
		sbs, err := eng.List(ctx, "")
		if err != nil {
			return nil, fmt.Errorf("list the engine's sandboxes: %w", err)
		}
		for _, sb := range sbs {
			got, err := eng.Get(ctx, sb.ID) // only the root's GET carries the token
			if errors.Is(err, sandbox.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("sandbox %s: %w", sb.ID, err)
			}
			out = append(out, secret{"sandbox token", got.Token})
		}
	}
	out = append(out, secret{"s3 secret key", d.S3().SecretKey})
	cli, err := config.LoadCLI(d.Bootstrap().CLIConfig, config.MapEnv(nil))
	if err != nil {
		return nil, fmt.Errorf("cli config: %w", err)
	}
	out = append(out, secret{"api token", cli.Token})
	return out, nil
}

var (
	handledMu      sync.Mutex
	handledSecrets []secret // of every stack the package's tests ran, for TestMain's scan
)

// handled records secrets a stack handled, for the scan of the test binary's own output.
func handled(s []secret) {
	handledMu.Lock()
	handledSecrets = append(handledSecrets, s...)
	handledMu.Unlock()
}
