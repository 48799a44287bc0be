package devstack_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/health"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// TestServeRolesRideOutOutages is the production roles' half of supervision: `cocoonbox serve
// api` and `serve worker`, started while PostgreSQL and Temporal do not answer, keep running
// and say "starting" (the API refusing calls with the dependency's name) until both answer,
// then serve without a restart; a dependency lost while they serve is reported in /healthz and
// /metrics and the roles serve again once it is back. The dependencies are the dev stack's
// own, reached through gates the test opens and shuts: shut refuses new connections and cuts
// open ones, as a dead server does.
func TestServeRolesRideOutOutages(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, _, _, _ := newBoxEnv(t, boxConfig(t), 6*time.Minute)
	bin := buildCLI(t)
	cli, err := config.LoadCLI(d.Bootstrap().CLIConfig, config.MapEnv(nil))
	if err != nil || cli.Token == "" {
		t.Fatalf("cli config: %+v, %v", cli, err)
	}

	// PostgreSQL listens on a Unix socket: the gate is a socket of the same name in a
	// directory of its own, which the URL's host names instead.
	pgURL, err := url.Parse(workerConfig(d).Postgres.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := pgURL.Query()
	sock := ".s.PGSQL." + q.Get("port")
	gateDir, err := os.MkdirTemp("", "pgg") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(gateDir) })
	pg := newNetGate(t, "unix", filepath.Join(gateDir, sock), filepath.Join(q.Get("host"), sock))
	q.Set("host", gateDir)
	pgURL.RawQuery = q.Encode()
	temporal := newNetGate(t, "tcp", freeLoopbackAddr(t), d.TemporalClient().Address)

	apiCfg := apiConfig(t, d)
	apiCfg.Postgres.URL, apiCfg.Temporal.Address = pgURL.String(), temporal.addr
	api := &childAPI{childRole: newChildRole(t, bin, "api", apiCfg), addr: apiCfg.Listen}
	wcfg := workerConfig(d)
	wcfg.Postgres.URL, wcfg.Temporal.Address, wcfg.HealthListen = pgURL.String(), temporal.addr, freeLoopbackAddr(t)
	wrk := newChildRole(t, bin, "worker", wcfg)
	api.launch(t)
	wrk.launch(t)

	boxLs := func() (string, error) {
		cmd := exec.Command(bin, "box", "ls", "--endpoint", api.url(), "--token", cli.Token)
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// refused waits until box ls fails saying want.
	refused := func(want string) {
		t.Helper()
		testutil.EventuallyReports(t, testutil.WaitLong, "box ls refused with "+want, func() (bool, string) {
			out, err := boxLs()
			return err != nil && strings.Contains(out, want), out
		})
	}
	works := func() {
		t.Helper()
		testutil.EventuallyReports(t, testutil.WaitLong, "box ls to work", func() (bool, string) {
			out, err := boxLs()
			return err == nil, out
		})
	}
	// status waits until the worker's /healthz reports st with component's line containing
	// want (not "ok", when want is empty), and the API's bare /healthz the same status.
	status := func(st, component, want string) {
		t.Helper()
		testutil.EventuallyReports(t, testutil.WaitLong, fmt.Sprintf("%s with %s %q", st, component, want), func() (bool, string) {
			w, wbody := getHealthReport("http://" + wcfg.HealthListen)
			a, abody := getHealthReport(api.url())
			line := w.Components[component]
			match := strings.Contains(line, want)
			if want == "" {
				match = line != "" && line != health.StatusOK
			}
			return w.Status == st && match && a.Status == st,
				"worker: " + wbody + " api: " + abody
		})
	}

	// Down at start: both wait for PostgreSQL, then for Temporal, and never exit.
	status(health.StatusStarting, "startup", "waiting for PostgreSQL")
	refused("the API is starting: waiting for PostgreSQL")
	pg.open(t)
	status(health.StatusStarting, "startup", "waiting for Temporal")
	refused("the API is starting: waiting for Temporal")
	temporal.open(t)
	for _, r := range []*childRole{api.childRole, wrk} {
		select {
		case err := <-r.ready:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(testutil.WaitLong):
			t.Fatalf("serve %s did not serve once its dependencies answered", r.role)
		}
	}
	status(health.StatusOK, "postgres", "ok")
	works()

	// Lost while serving: reported by name in /healthz and /metrics, and served again once back.
	pg.shut()
	status(health.StatusDegraded, "postgres", "")
	refused("PostgreSQL")
	if m := getText(t, "http://"+wcfg.HealthListen+"/metrics"); !strings.Contains(m, `cocoonbox_component_up{component="postgres"} 0`) ||
		!strings.Contains(m, `cocoonbox_component_up{component="temporal"} 1`) {
		t.Errorf("worker metrics with PostgreSQL down:\n%s", m)
	}
	pg.open(t)
	status(health.StatusOK, "postgres", "ok")
	works()
	temporal.shut()
	status(health.StatusDegraded, "temporal", "")
	temporal.open(t)
	status(health.StatusOK, "temporal", "ok")
	works()
	for _, r := range []*childRole{api.childRole, wrk} {
		if r.cmd.ProcessState != nil {
			t.Errorf("serve %s exited: %v", r.role, r.cmd.ProcessState)
		}
	}
}

// getHealthReport fetches base/healthz, returning the zero report when it cannot.
func getHealthReport(base string) (health.Report, string) {
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		return health.Report{}, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var rep health.Report
	_ = json.Unmarshal(b, &rep)
	return rep, string(b)
}

func getText(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// netGate forwards connections made to addr on to target while it is open. Shut, it refuses new
// connections and cuts the open ones, as a dependency that dies does. It starts shut; the
// test's cleanup shuts it.
type netGate struct {
	network, addr, target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
}

func newNetGate(t *testing.T, network, addr, target string) *netGate {
	g := &netGate{network: network, addr: addr, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(g.shut)
	return g
}

func (g *netGate) open(t *testing.T) {
	t.Helper()
	ln, err := net.Listen(g.network, g.addr)
	if err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	g.ln = ln
	g.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.forward(c)
		}
	}()
}

func (g *netGate) forward(c net.Conn) {
	up, err := net.Dial(g.network, g.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !g.track(c, up) {
		return
	}
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
}

// track records an open pair, or closes it when the gate was shut meanwhile.
func (g *netGate) track(cs ...net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln == nil {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		g.conns[c] = struct{}{}
	}
	return true
}

func (g *netGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln != nil {
		_ = g.ln.Close()
		g.ln = nil
	}
	for c := range g.conns {
		_ = c.Close()
	}
	clear(g.conns)
}
