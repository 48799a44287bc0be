package devstack

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.temporal.io/server/common/dynamicconfig"
	servertemporal "go.temporal.io/server/temporal"

	"github.com/loomhand/cocoonbox/internal/tclient"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// The search attributes cocoonbox registers; the test uses the same set.
var testSearchAttributes = map[string]enumspb.IndexedValueType{
	"Owner":    enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	"BoxState": enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	"BoxName":  enumspb.INDEXED_VALUE_TYPE_KEYWORD,
}

const testTaskQueue = "devstack-test"

func greet(_ workflow.Context, name string) (string, error) {
	return "hello " + name, nil
}

// startTestTemporal starts a server in dir and stops it at cleanup; on failure it prints the
// tail of the server log, which is where the reason usually is.
func startTestTemporal(ctx context.Context, t *testing.T, opts TemporalOptions) (*Temporal, time.Duration) {
	t.Helper()
	began := time.Now()
	tp, err := StartTemporal(ctx, opts)
	took := time.Since(began)
	if err != nil {
		dumpLog(t, opts.DataDir)
		t.Fatalf("StartTemporal: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpLog(t, opts.DataDir)
		}
		if err := tp.Stop(); err != nil {
			t.Errorf("Stop at cleanup: %v", err)
		}
	})
	return tp, took
}

func dumpLog(t *testing.T, dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "temporal.log"))
	if err != nil {
		return
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	t.Logf("temporal.log tail:\n%s", b)
}

// dialTest dials tp as the dev stack's own clients do, with the client certificate from its
// data dir.
func dialTest(t *testing.T, tp *Temporal) client.Client {
	t.Helper()
	opts, err := tclient.Options(tp.ClientConfig(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(opts)
	if err != nil {
		t.Fatalf("dial temporal: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestTemporalRunsWorkflowAndKeepsStateAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	opts := TemporalOptions{DataDir: dir, SearchAttributes: testSearchAttributes}

	tp, cold := startTestTemporal(ctx, t, opts)
	t.Logf("cold start: %v (frontend %s, ui %s)", cold, tp.Address(), tp.UIURL())
	if err := tp.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}

	c := dialTest(t, tp)
	w := worker.New(c, testTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(greet, workflow.RegisterOptions{Name: "Greet"})
	if err := w.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(w.Stop) // Stop is idempotent; this covers a failure before the explicit Stop
	owner := temporal.NewSearchAttributeKeyKeyword("Owner")
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    "greet-1",
		TaskQueue:             testTaskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(owner.ValueSet("alice")),
	}, "Greet", "box")
	if err != nil {
		t.Fatalf("start workflow: %v", err)
	}
	var got string
	if err := run.Get(ctx, &got); err != nil || got != "hello box" {
		t.Fatalf("workflow result = %q, %v; want %q", got, err, "hello box")
	}
	// Once the services have read the search attributes, they stop reading the namespace
	// from the store on every use of one; a start with them still works and is found by them.
	testutil.Eventually(t, testutil.WaitShort, "the search attributes settled", func() bool { return !tp.readsSearchAttributes() })
	settled, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    "greet-2",
		TaskQueue:             testTaskQueue,
		TypedSearchAttributes: temporal.NewSearchAttributes(owner.ValueSet("bob")),
	}, "Greet", "settled")
	if err != nil {
		t.Fatalf("start workflow once settled: %v", err)
	}
	if err := settled.Get(ctx, &got); err != nil {
		t.Fatalf("workflow result once settled: %v", err)
	}
	listedBy(ctx, t, c, tp.Namespace(), `Owner = "bob"`)
	w.Stop()

	sa, err := c.OperatorService().ListSearchAttributes(ctx,
		&operatorservice.ListSearchAttributesRequest{Namespace: tp.Namespace()})
	if err != nil {
		t.Fatalf("list search attributes: %v", err)
	}
	for name, typ := range testSearchAttributes {
		if have := sa.GetCustomAttributes()[name]; have != typ {
			t.Errorf("search attribute %s = %v, want %v", name, have, typ)
		}
	}

	ui := uiSession(ctx, t, tp)
	for _, path := range []string{"/", "/api/v1/namespaces/" + tp.Namespace()} {
		if code := httpStatus(ctx, t, ui, tp.UIURL()+path); code != http.StatusOK {
			t.Errorf("GET ui %s = %d, want 200", path, code)
		}
	}

	// A second server on the same dir would corrupt the first one's shards.
	if _, err := StartTemporal(ctx, opts); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second StartTemporal on a busy dir: err = %v, want 'in use'", err)
	}

	uiURL := tp.UIURL()
	if err := tp.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := tp.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := tp.Check(ctx); err == nil {
		t.Errorf("Check after Stop succeeded")
	}
	if _, err := http.Get(uiURL + "/healthz"); err == nil {
		t.Errorf("ui still answers after Stop")
	}

	opts.Retention = 72 * time.Hour
	tp2, warm := startTestTemporal(ctx, t, opts)
	t.Logf("restart: %v, rss after restart: %s", warm, rss())
	if tp2.readsSearchAttributes() {
		t.Errorf("a restart with every search attribute registered still reads them from the store on each use")
	}
	c2 := dialTest(t, tp2)
	desc, err := c2.DescribeWorkflowExecution(ctx, "greet-1", run.GetRunID())
	if err != nil {
		t.Fatalf("describe workflow after restart: %v", err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Errorf("workflow status after restart = %v, want completed", st)
	}
	// Visibility lives in the same file and is written asynchronously; the first start had
	// plenty of time, but poll rather than trust that.
	listedBy(ctx, t, c2, tp2.Namespace(), `Owner = "alice"`)
	ns, err := c2.WorkflowService().DescribeNamespace(ctx,
		&workflowservice.DescribeNamespaceRequest{Namespace: tp2.Namespace()})
	if err != nil {
		t.Fatalf("describe namespace: %v", err)
	}
	if r := ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(); r != 72*time.Hour {
		t.Errorf("retention after restart = %v, want 72h", r)
	}
}

func TestTemporalOccupiedPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	port := l.Addr().(*net.TCPAddr).Port
	addr := "127.0.0.1:" + strconv.Itoa(port)

	for _, tc := range []struct {
		name string
		opts TemporalOptions
		want string
	}{
		{"frontend", TemporalOptions{Port: port}, "temporal frontend: listen " + addr + ": address already in use"},
		{"ui", TemporalOptions{UIPort: port}, "temporal ui: listen " + addr + ": address already in use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.DataDir = t.TempDir()
			tp, err := StartTemporal(t.Context(), tc.opts)
			if err == nil {
				_ = tp.Stop()
				t.Fatalf("StartTemporal on a taken port succeeded")
			}
			if err.Error() != tc.want {
				t.Errorf("err = %q, want %q", err, tc.want)
			}
			if !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("err does not wrap EADDRINUSE")
			}
			// A failed start must leave the dir unlocked.
			if f, err := lockDataDir(tc.opts.DataDir); err != nil {
				t.Errorf("data dir still locked after failed start: %v", err)
			} else {
				_ = f.Close()
			}
		})
	}
}

// A port can be taken between our check and the server's bind; the server reports that
// with a Fatal log, which must come back as an error rather than exit the process.
func TestTemporalBindRaceIsAnError(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "temporal.db")
	if err := prepareSQLite(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	var res reservation
	defer res.release()
	var ports servicePorts
	for _, p := range []*int{&ports.frontend, &ports.matching, &ports.worker, &ports.history} {
		var err error
		if *p, err = res.reserve("test", loopback, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Release all but history's listener, which plays the port thief.
	for _, l := range res[:3] {
		_ = l.Close()
	}
	addr := net.JoinHostPort(loopback, strconv.Itoa(ports.frontend))
	l := newServerLogger(slog.New(slog.DiscardHandler))
	srv, err := startServer(l,
		servertemporal.WithConfig(serverConfig(db, loopback, addr, ports)),
		servertemporal.ForServices(servertemporal.DefaultServices),
		servertemporal.WithStaticHosts(staticHosts(addr, ports)),
		servertemporal.WithLogger(l),
		servertemporal.WithDynamicConfigClient(dynamicConfig()),
	)
	if err == nil {
		_ = srv.Stop()
		t.Fatal("startServer with a taken history port succeeded")
	}
	want := "address already in use"
	if !strings.HasPrefix(err.Error(), "start temporal server: ") || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %q, want start temporal server: ... %s", err, want)
	}
}

func TestTemporalUnusableDataDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := StartTemporal(t.Context(), TemporalOptions{DataDir: filepath.Join(file, "data")})
	if err == nil || !strings.HasPrefix(err.Error(), "create temporal data dir: ") ||
		!strings.HasSuffix(err.Error(), "not a directory") {
		t.Errorf("err = %v, want create temporal data dir: ... not a directory", err)
	}
	if _, err := StartTemporal(t.Context(), TemporalOptions{}); err == nil {
		t.Errorf("StartTemporal without a data dir succeeded")
	}
}

func TestPrepareSQLiteIsIdempotentAndPinsVersion(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "temporal.db")
	for range 2 {
		if err := prepareSQLite(ctx, path); err != nil {
			t.Fatalf("prepareSQLite: %v", err)
		}
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	if _, err := db.Exec("PRAGMA user_version = 1031000"); err != nil {
		t.Fatal(err)
	}
	err = prepareSQLite(ctx, path)
	if err == nil || !strings.Contains(err.Error(), "written by server 1.31.0") {
		t.Errorf("prepareSQLite on an old file: err = %v, want a version refusal", err)
	}
}

func TestVersionStamp(t *testing.T) {
	for in, want := range map[string]int64{"1.32.1": 1_032_001, "1.33.0-rc1": 1_033_000} {
		got, err := versionStamp(in)
		if err != nil || got != want {
			t.Errorf("versionStamp(%q) = %d, %v; want %d", in, got, err, want)
		}
		if s := stampString(got); !strings.HasPrefix(in, s) {
			t.Errorf("stampString(%d) = %q, want prefix of %q", got, s, in)
		}
	}
	if _, err := versionStamp("1.32"); err == nil {
		t.Errorf("versionStamp(1.32) succeeded")
	}
}

func httpStatus(ctx context.Context, t *testing.T, c *http.Client, url string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// rss reads this process's resident set size, for the start-time log line.
func rss() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// listedBy waits until query lists exactly one workflow.
func listedBy(ctx context.Context, t *testing.T, c client.Client, namespace, query string) {
	t.Helper()
	if err := testutil.Poll(ctx, 0, func() error {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: query})
		if err != nil {
			return err
		}
		if n := len(resp.GetExecutions()); n != 1 {
			return errors.New("want 1 execution, have " + strconv.Itoa(n))
		}
		return nil
	}); err != nil {
		t.Errorf("list workflows where %s: %v", query, err)
	}
}

// readsSearchAttributes reports whether the services still read the namespace from the store
// on every use of a search attribute.
func (t *Temporal) readsSearchAttributes() bool {
	cvs := t.dc.GetValue(dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key())
	return len(cvs) > 0 && cvs[0].Value == true
}
