package devstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/internal/api"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// testConfig is a dev configuration on free loopback ports under a fresh data dir.
func testConfig(t *testing.T, home string) config.Dev {
	t.Helper()
	cfg := config.DefaultDev(config.MapEnv(map[string]string{"HOME": t.TempDir()}))
	cfg.Home = home
	cfg.CLIConfig = filepath.Join(home, "cli.yaml")
	cfg.Listen, cfg.TemporalListen, cfg.TemporalUIListen, cfg.S3Listen, cfg.EngineListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Template = "base" // the small image: tests that need the desktop ask for it
	cfg.Pools = nil       // no warm boxes booting beside each test; those that need a pool set one
	return cfg
}

// startDev starts the stack cfg describes, with its logs in files the secret scan reads, and
// closes it, after the scan, when the test ends.
func startDev(t *testing.T, cfg config.Dev) *devstack.Dev {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sc, log := newStackScan(t, cfg.Home)
	d, err := devstack.Start(ctx, cfg, log)
	if err != nil {
		t.Fatalf("start dev stack: %v", err)
	}
	t.Cleanup(func() { _ = sc.close(t, d) })
	return d
}

func echoWorkflow(_ workflow.Context, s string) (string, error) { return "echo: " + s, nil }

// TestDevStackSurvivesRestart is the foundation's acceptance test: the stack comes up healthy,
// serves an authenticated API, runs a workflow, stores objects and rows, and after a restart on
// the same data dir still has all of them.
func TestDevStackSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	home := filepath.Join(t.TempDir(), "home")
	cfg := testConfig(t, home)
	ctx := context.Background()

	d := startDev(t, cfg)
	if b := d.Bootstrap(); !b.CreatedUser || !b.CreatedToken {
		t.Fatalf("first start bootstrap = %+v, want a new user and token", b)
	}
	health := getHealth(t, d)
	for _, c := range []string{"temporal", "postgres", "s3", "engine"} {
		if health.Components[c] != "ok" {
			t.Fatalf("healthz %s = %q (%+v)", c, health.Components[c], health)
		}
	}
	cli, err := config.LoadCLI(cfg.CLIConfig, config.MapEnv(nil))
	if err != nil || cli.Token == "" || cli.Endpoint != d.URLs().API {
		t.Fatalf("cli config = %+v, %v", cli, err)
	}
	if got := whoami(t, cli); got != "admin" {
		t.Fatalf("whoami = %q, want admin", got)
	}
	if _, err := whoamiErr(cli.Endpoint, "cbx_not_a_token"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unknown token: %v, want Unauthenticated", err)
	}
	if _, err := whoamiErr(cli.Endpoint, ""); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "missing bearer token") {
		t.Fatalf("no token: %v", err)
	}

	// A trivial workflow runs to completion on the embedded server.
	w := worker.New(d.Temporal, "devstack-test", worker.Options{})
	w.RegisterWorkflow(echoWorkflow)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	run, err := d.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "devstack-echo", TaskQueue: "devstack-test"}, echoWorkflow, "hi")
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := run.Get(ctx, &out); err != nil || out != "echo: hi" {
		t.Fatalf("workflow result %q, %v", out, err)
	}
	w.Stop()

	// An object through the S3 API, and a row through the store.
	if err := d.Blobs.Put(ctx, "test/hello.txt", strings.NewReader("hello, s3"), 9); err != nil {
		t.Fatal(err)
	}
	u, err := d.Store.CreateUser(ctx, store.NewUser{Name: "ann"})
	if err != nil {
		t.Fatal(err)
	}

	// A second dev stack on the same data dir is refused while the first runs.
	if _, err := devstack.Start(ctx, testConfig(t, home), nil); err == nil || !strings.Contains(err.Error(), "in use by another cocoonbox dev") {
		t.Fatalf("second dev stack on one data dir: %v", err)
	}

	if err := closeDev(t, d); err != nil {
		t.Fatalf("close: %v", err)
	}
	assertNoPostgres(t, home)

	// Restart: same user and token, the workflow, the object and the row are all still there.
	d = startDev(t, cfg)
	if b := d.Bootstrap(); b.CreatedUser || b.CreatedToken {
		t.Fatalf("restart bootstrap = %+v, want the existing user and token kept", b)
	}
	cli2, _ := config.LoadCLI(cfg.CLIConfig, config.MapEnv(nil))
	if cli2.Token != cli.Token {
		t.Fatal("restart replaced a working token")
	}
	if got := whoami(t, cli2); got != "admin" {
		t.Fatalf("whoami after restart = %q", got)
	}
	desc, err := d.Temporal.DescribeWorkflowExecution(ctx, "devstack-echo", "")
	if err != nil {
		t.Fatalf("workflow from before the restart: %v", err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus().String(); st != "Completed" {
		t.Fatalf("workflow status after restart %s", st)
	}
	rc, err := d.Blobs.Get(ctx, "test/hello.txt")
	if err != nil {
		t.Fatalf("object from before the restart: %v", err)
	}
	body, _ := io.ReadAll(rc)
	rc.Close()
	if string(body) != "hello, s3" {
		t.Fatalf("object body %q", body)
	}
	if got, err := d.Store.UserByName(ctx, "ann"); err != nil || got.ID != u.ID {
		t.Fatalf("row from before the restart: %+v, %v", got, err)
	}
	if ui := d.URLs().TemporalUI; ui != "" {
		// The UI asks for its token, and with it shows the workflow run before the restart.
		token, err := os.ReadFile(d.TemporalUIToken())
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			token string
			want  int
		}{{"", http.StatusUnauthorized}, {strings.TrimSpace(string(token)), http.StatusOK}} {
			req, _ := http.NewRequest(http.MethodGet, ui+"/api/v1/namespaces/default/workflows/devstack-echo", nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			if err != nil || resp.StatusCode != tc.want {
				t.Fatalf("temporal ui api with token %v: %v %v, want %d", tc.token != "", resp, err, tc.want)
			}
		}
	}
}

func TestDevStartErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	ctx := context.Background()

	t.Run("occupied port", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		for _, tc := range []struct {
			set  func(*config.Dev, string)
			want string
		}{
			{func(c *config.Dev, a string) { c.Listen = a }, "api: listen "},
			{func(c *config.Dev, a string) { c.S3Listen = a }, "s3: listen "},
			{func(c *config.Dev, a string) { c.TemporalListen = a }, "temporal frontend: listen "},
			{func(c *config.Dev, a string) { c.TemporalUIListen = a }, "temporal ui: listen "},
			{func(c *config.Dev, a string) { c.EngineListen = a }, "engine: listen "},
		} {
			cfg := testConfig(t, t.TempDir())
			tc.set(&cfg, ln.Addr().String())
			_, err := devstack.Start(ctx, cfg, nil)
			want := tc.want + ln.Addr().String() + ": address already in use"
			if err == nil || err.Error() != want {
				t.Errorf("got %v, want %q", err, want)
			}
			if _, serr := os.Stat(filepath.Join(cfg.Home, "postgres")); serr == nil {
				t.Errorf("%s: postgres was initialised before the port check", tc.want)
			}
		}
	})

	t.Run("data dir not writable", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(t, t.TempDir())
		cfg.Home = filepath.Join(file, "home")
		_, err := devstack.Start(ctx, cfg, nil)
		if err == nil || err.Error() != "data dir "+cfg.Home+": cannot create it: not a directory" {
			t.Fatalf("got %v", err)
		}
	})

	t.Run("invalid config", func(t *testing.T) {
		cfg := testConfig(t, t.TempDir())
		cfg.Listen = "8420"
		if _, err := devstack.Start(ctx, cfg, nil); err == nil || !strings.Contains(err.Error(), "config listen") {
			t.Fatalf("got %v", err)
		}
	})
}

// getHealth reads /healthz as an operator (the dev user is an admin), after checking that the
// same request without a token gets the bare status only.
func getHealth(t *testing.T, d *devstack.Dev) api.HealthReport {
	t.Helper()
	cli, err := config.LoadCLI(d.Bootstrap().CLIConfig, config.MapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if bare := readHealth(t, d.URLs().API, ""); len(bare.Components) != 0 {
		t.Fatalf("healthz without a token shows its components: %+v", bare)
	}
	return readHealth(t, d.URLs().API, cli.Token)
}

func readHealth(t *testing.T, base, token string) api.HealthReport {
	t.Helper()
	rep, ok, body, err := fetchHealth(base, token)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("healthz: %s", body)
	}
	return rep
}

// fetchHealth reads /healthz, as an operator when token is set: its report, whether it says ok,
// and the raw body.
func fetchHealth(base, token string) (api.HealthReport, bool, string, error) {
	var rep api.HealthReport
	req, err := http.NewRequest(http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return rep, false, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return rep, false, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&rep); err != nil {
		return rep, false, "", fmt.Errorf("healthz %d body %q: %v", resp.StatusCode, body, err)
	}
	return rep, resp.StatusCode == http.StatusOK && rep.Status == "ok", fmt.Sprintf("%d %s", resp.StatusCode, body), nil
}

func whoami(t *testing.T, cli config.CLI) string {
	t.Helper()
	resp, err := whoamiErr(cli.Endpoint, cli.Token)
	if err != nil {
		t.Fatalf("whoami: %v", err)
	}
	return resp.GetUser().GetName()
}

func whoamiErr(endpoint, token string) (*cbv1.WhoAmIResponse, error) {
	conn, err := grpc.NewClient(strings.TrimPrefix(endpoint, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return cbv1.NewAccountServiceClient(conn).WhoAmI(ctx, &cbv1.WhoAmIRequest{})
}

// assertNoPostgres checks that closing the stack stopped its PostgreSQL server.
func assertNoPostgres(t *testing.T, home string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(home, "postgres", "postmaster.pid")); err == nil {
		t.Fatal("postgres still running after Close (postmaster.pid exists)")
	}
}

// shortTemp is a temporary directory with a short path: runsc's unix socket paths under the
// engine's data dir must fit in 108 bytes, which t.TempDir's long names can exceed.
func shortTemp(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cbdev-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unmountLeft(t, dir)
		_ = os.RemoveAll(dir)
	})
	return dir
}

func storeUser(name string) store.NewUser { return store.NewUser{Name: name} }

// boxConfig is a dev configuration for tests that run gVisor boxes (a short data dir path).
func boxConfig(t *testing.T) config.Dev {
	return testConfig(t, filepath.Join(shortTemp(t), "h"))
}

// newBoxEnv starts a dev stack for box tests and returns it with a context bounded by timeout,
// the dev user, and a root client of its engine for checking what the workflows did there.
func newBoxEnv(t *testing.T, cfg config.Dev, timeout time.Duration) (*devstack.Dev, context.Context, store.User, *sandbox.HTTP) {
	t.Helper()
	d := startDev(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	owner, err := d.Store.UserByName(ctx, "admin")
	if err != nil {
		t.Fatal(err)
	}
	url, rootToken := d.Sandbox()
	return d, ctx, owner, sandbox.NewHTTP(url, rootToken, &http.Client{Timeout: time.Minute})
}
