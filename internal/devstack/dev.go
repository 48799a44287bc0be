package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/loomhand/cocoonbox/internal/api"
	"github.com/loomhand/cocoonbox/internal/app"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/pgcluster"
	"github.com/loomhand/cocoonbox/internal/s3server"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/tclient"
	"github.com/loomhand/cocoonbox/internal/worker"
	"github.com/loomhand/cocoonbox/workflows"
)

// Dev is the running `cocoonbox dev` program: the backing services it embeds (unless configured
// to use external ones), the store, and the API server.
type Dev struct {
	cfg config.Dev
	log *slog.Logger

	lock     *os.File
	temporal *temporalChild     // nil when Temporal is external
	pg       *pgcluster.Cluster // nil when PostgreSQL is external
	s3       *s3server.Server   // nil when S3 is external

	Store    *store.Store
	Temporal client.Client
	Blobs    *objstore.S3
	api      *api.Server
	keys     *secrets.Keyring
	parts    app.Parts // what the API and its box service are built on
	apiAddr  string
	apiDone  chan struct{} // closed when the API server has returned, apiErr then set
	apiErr   error
	// done is closed when the stack stops on its own (the API server returned, or a child was
	// given up), err then set; stopOnce guards both.
	done     chan struct{}
	err      error
	stopOnce sync.Once
	// sups watch the managed children (PostgreSQL, the S3 server, Temporal, the engine) and start
	// them again.
	sups     map[string]*supervisor
	cancel   context.CancelFunc
	boot     Bootstrap
	s3Config objstore.Config
	tcfg     config.Temporal // how this stack's clients dial Temporal

	// Boxes creates and drives boxes through their workflows (the API's service layer).
	Boxes  *boxsvc.Service
	worker *worker.Worker
	// stopHooks stops the webhook dispatcher and the reconciler and waits for them.
	stopHooks func()
	// agentMu guards cfg.Agent, which the worker reads at each agent step.
	agentMu sync.Mutex

	engine       *localEngine // nil when an external sandboxd is configured
	sandboxURL   string
	sandboxToken string
	httpClient   *http.Client
}

// URLs are the addresses a person or a test uses to reach the running system.
type URLs struct {
	API        string // http://host:port (gRPC h2c, /healthz)
	TemporalUI string // "" when Temporal is external
	Temporal   string // host:port of the Temporal frontend
	S3         string // S3 endpoint
	Engine     string // the sandbox engine (sandboxd API)
}

// Start brings up the whole dev system described by cfg and returns once the API answers. On any
// error everything already started is stopped again, and the error is one line naming the problem.
func Start(ctx context.Context, cfg config.Dev, log *slog.Logger) (_ *Dev, retErr error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Dev{cfg: cfg, log: log, httpClient: &http.Client{Timeout: 10 * time.Second},
		done: make(chan struct{}), sups: map[string]*supervisor{}}
	defer func() {
		if retErr != nil {
			_ = d.Close()
		}
	}()
	if err := prepareHome(cfg.Home); err != nil {
		return nil, err
	}
	lock, err := lockHome(cfg.Home)
	if err != nil {
		return nil, err
	}
	d.lock = lock
	// Bind the API port first and check the others, so a busy port fails before anything slow starts.
	apiLn, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, listenError("api", cfg.Listen, err)
	}
	d.apiAddr = apiLn.Addr().String()
	defer func() {
		if retErr != nil {
			_ = apiLn.Close()
		}
	}()
	if err := d.checkPorts(); err != nil {
		return nil, err
	}
	var engineLn net.Listener
	if cfg.Sandbox.URL == "" {
		if engineLn, err = net.Listen("tcp", cfg.EngineListen); err != nil {
			return nil, listenError("engine", cfg.EngineListen, err)
		}
		defer func() {
			if retErr != nil && d.engine == nil {
				_ = engineLn.Close()
			}
		}()
	}

	if err := d.startPostgres(ctx); err != nil {
		return nil, err
	}
	if err := d.startS3(ctx); err != nil {
		return nil, err
	}
	if err := d.startTemporal(ctx); err != nil {
		return nil, err
	}
	if err := d.startEngine(ctx, engineLn); err != nil {
		return nil, err
	}
	d.applyPools(ctx)

	d.Store, err = store.Open(ctx, d.databaseURL())
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	// nil: the store's own client, with connect and header timeouts but no overall limit,
	// which would cut off a large snapshot download; each call is bounded by its context.
	d.Blobs, err = objstore.NewS3(ctx, d.s3Config, nil)
	if err != nil {
		return nil, fmt.Errorf("s3: %w", err)
	}
	if err := d.Blobs.EnsureBucket(ctx); err != nil {
		return nil, fmt.Errorf("s3 bucket %s: %w", d.s3Config.Bucket, err)
	}
	d.Temporal, err = tclient.Dial(ctx, d.tcfg, log.With("component", "temporal-client"))
	if err != nil {
		return nil, err
	}
	d.boot, err = bootstrap(ctx, d.Store, cfg, "http://"+d.apiAddr)
	if err != nil {
		return nil, err
	}
	if err := d.startWorker(); err != nil {
		return nil, err
	}

	d.api = app.API(d.parts, d.Boxes, app.APIOptions{Checks: map[string]api.Check{
		"postgres": d.supervised("postgres", func(ctx context.Context) error { return d.Store.Ping(ctx) }),
		"s3":       d.supervised("s3", func(ctx context.Context) error { return d.Blobs.Check(ctx) }),
		"engine":   d.supervised("engine", d.checkEngine),
		"temporal": d.supervised("temporal", tclient.Ping(d.Temporal)),
	}, PreviewDomain: devPreviewDomain(cfg.PreviewDomain, d.apiAddr)})
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	d.apiDone = make(chan struct{})
	go func() {
		d.apiErr = d.api.Serve(serveCtx, apiLn)
		close(d.apiDone)
		d.stopped(fmt.Errorf("api server stopped: %w", d.apiErr))
	}()
	return d, nil
}

// watch starts supervising a managed child: it is started again when it dies, and the stack
// stops (Done) when it cannot be.
func (d *Dev) watch(name string, child restartable) {
	d.sups[name] = newSupervisor(name, child, d.log, d.stopped)
}

// supervised is the /healthz check of a managed child: its supervisor's state while it is not
// running, else check. A dependency configured outside the stack has no supervisor.
func (d *Dev) supervised(name string, check api.Check) api.Check {
	sup := d.sups[name]
	return func(ctx context.Context) error {
		if sup != nil {
			if err := sup.Check(); err != nil {
				return err
			}
		}
		return check(ctx)
	}
}

// Children reports each managed child's supervision state, by name.
func (d *Dev) Children() map[string]ChildState {
	out := make(map[string]ChildState, len(d.sups))
	for name, s := range d.sups {
		out[name] = s.State()
	}
	return out
}

// stopped records why the stack stops on its own; the first reason wins.
func (d *Dev) stopped(err error) {
	d.stopOnce.Do(func() {
		d.err = err
		close(d.done)
	})
}

// URLs returns where the running system answers.
func (d *Dev) URLs() URLs {
	u := URLs{API: "http://" + d.apiAddr, Temporal: d.tcfg.Address, S3: d.s3Config.Endpoint, Engine: d.sandboxURL}
	if d.temporal != nil {
		u.TemporalUI = d.temporal.UIURL()
	}
	return u
}

// TemporalClient is how a client outside this process (a worker, `serve api`, the temporal CLI)
// dials this stack's Temporal: for the embedded server, its address with the CA, client
// certificate and server name from the data dir.
func (d *Dev) TemporalClient() config.Temporal { return d.tcfg }

// TemporalUIToken is the file holding the embedded Temporal UI's login token, or "" when the UI
// asks for none (external Temporal, or temporal_insecure).
func (d *Dev) TemporalUIToken() string {
	if d.temporal == nil {
		return ""
	}
	return d.temporal.UITokenPath()
}

// Home returns the data dir.
func (d *Dev) Home() string { return d.cfg.Home }

// Sandbox returns the sandbox engine's URL and root token, for the worker and tests.
func (d *Dev) Sandbox() (url, rootToken string) { return d.sandboxURL, d.sandboxToken }

// S3 is the snapshot bucket's configuration (the embedded server's, with its credentials, unless
// an external one was configured), for a worker started separately against this stack.
func (d *Dev) S3() config.S3 {
	c := d.s3Config
	return config.S3{Endpoint: c.Endpoint, Region: c.Region, Bucket: c.Bucket,
		AccessKey: c.AccessKey, SecretKey: c.SecretKey, PathStyle: c.PathStyle}
}

// Bootstrap reports what the first start created.
func (d *Dev) Bootstrap() Bootstrap { return d.boot }

// Done is closed when the stack stops on its own (the API server returned, or a managed child
// died and could not be started again) or by Close; Err then says why.
func (d *Dev) Done() <-chan struct{} { return d.done }

// Err is why the stack stopped, once Done is closed.
func (d *Dev) Err() error { return d.err }

// Close stops everything Start started, in reverse order, and is safe to call more than once.
func (d *Dev) Close() error {
	var errs []error
	if d.cancel != nil {
		d.cancel()
		<-d.apiDone // closed, not sent on: a caller that saw Done first cannot make this block
		if err := d.apiErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("stop api: %w", err))
		}
		d.cancel = nil
	}
	for _, s := range d.sups {
		s.Close() // before the children stop, which is then not a death to recover from
	}
	if d.stopHooks != nil {
		d.stopHooks()
		d.stopHooks = nil
	}
	if d.worker != nil {
		d.worker.Stop()
		d.worker = nil
	}
	if d.engine != nil {
		if err := d.engine.stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop engine: %w", err))
		}
		d.engine = nil
	}
	if d.Temporal != nil {
		d.Temporal.Close()
		d.Temporal = nil
	}
	if d.Store != nil {
		d.Store.Close()
		d.Store = nil
	}
	if d.temporal != nil {
		if err := d.temporal.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop temporal: %w", err))
		}
		d.temporal = nil
	}
	if d.s3 != nil {
		if err := d.s3.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop s3: %w", err))
		}
		d.s3 = nil
	}
	if d.pg != nil {
		if err := d.pg.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop postgres: %w", err))
		}
		d.pg = nil
	}
	if d.lock != nil {
		_ = d.lock.Close()
		d.lock = nil
	}
	return errors.Join(errs...)
}

func (d *Dev) databaseURL() string {
	if d.pg != nil {
		return d.pg.URL("cocoonbox")
	}
	return d.cfg.Postgres.URL
}

func (d *Dev) startPostgres(ctx context.Context) error {
	if d.cfg.Postgres.URL != "" {
		return nil
	}
	dir := d.cfg.DataDir("postgres")
	if err := pgcluster.Init(ctx, dir); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	pg, err := pgcluster.Start(ctx, pgcluster.Options{
		Dir: dir, Database: "cocoonbox",
		// However cocoonbox dev ends, even by SIGKILL, its database server ends with it.
		DieWithParent: true,
	})
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	d.pg = pg
	d.watch("postgres", pg)
	return nil
}

func (d *Dev) startS3(ctx context.Context) error {
	d.s3Config = objstore.Config{
		Endpoint: d.cfg.S3.Endpoint, Region: d.cfg.S3.Region, Bucket: d.cfg.S3.Bucket,
		AccessKey: d.cfg.S3.AccessKey, SecretKey: d.cfg.S3.SecretKey, PathStyle: d.cfg.S3.PathStyle,
	}
	if d.cfg.S3.Endpoint != "" {
		return nil
	}
	dir := d.cfg.DataDir("s3")
	access, secret, err := s3server.LoadOrCreateCredentials(filepath.Join(dir, "credentials.yaml"))
	if err != nil {
		return fmt.Errorf("s3: %w", err)
	}
	srv, err := s3server.Start(ctx, s3server.Options{
		Dir: filepath.Join(dir, "data"), Addr: d.cfg.S3Listen, AccessKey: access, SecretKey: secret,
		Logger: d.log.With("component", "s3"),
	})
	if err != nil {
		return err
	}
	d.s3 = srv
	d.watch("s3", srv)
	d.s3Config.Endpoint, d.s3Config.AccessKey, d.s3Config.SecretKey, d.s3Config.PathStyle = srv.Endpoint(), access, secret, true
	return nil
}

func (d *Dev) startTemporal(ctx context.Context) error {
	if d.cfg.Temporal.Address != "" {
		d.tcfg = d.cfg.Temporal
		return nil
	}
	host, port := splitHostPort(d.cfg.TemporalListen)
	_, uiPort := splitHostPort(d.cfg.TemporalUIListen)
	t, err := startTemporalChild(ctx, TemporalOptions{
		DataDir: d.cfg.DataDir("temporal"), Host: host, Port: port, UIPort: uiPort,
		Namespace: d.cfg.Temporal.Namespace, SearchAttributes: workflows.SearchAttributes,
		Insecure: d.cfg.TemporalInsecure,
	}, d.log.With("component", "temporal"))
	if err != nil {
		return err
	}
	d.temporal = t
	d.tcfg = t.ClientConfig()
	d.watch("temporal", t)
	return nil
}

// checkPorts fails fast, with the component named, when a port an embedded service needs is taken.
func (d *Dev) checkPorts() error {
	type want struct{ what, addr string }
	var ws []want
	if d.cfg.Temporal.Address == "" {
		ws = append(ws, want{"temporal frontend", d.cfg.TemporalListen}, want{"temporal ui", d.cfg.TemporalUIListen})
	}
	if d.cfg.S3.Endpoint == "" {
		ws = append(ws, want{"s3", d.cfg.S3Listen})
	}
	for _, w := range ws {
		if _, port := splitHostPort(w.addr); port == 0 {
			continue
		}
		ln, err := net.Listen("tcp", w.addr)
		if err != nil {
			return listenError(w.what, w.addr, err)
		}
		_ = ln.Close()
	}
	return nil
}

// prepareHome creates the data dir and proves it is writable, so the problem is named up front
// rather than surfacing later as a database or Temporal error.
func prepareHome(home string) error {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("data dir %s: cannot create it: %w", home, unwrapPathError(err))
	}
	f, err := os.CreateTemp(home, ".writable-*")
	if err != nil {
		return fmt.Errorf("data dir %s: not writable: %w", home, unwrapPathError(err))
	}
	_ = f.Close()
	return os.Remove(f.Name())
}

// lockHome takes an exclusive lock on the data dir so that two `cocoonbox dev` processes never
// share one set of databases; the kernel drops the lock when the process dies.
func lockHome(home string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(home, "dev.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", home, unwrapPathError(err))
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s: in use by another cocoonbox dev; stop it or set COCOONBOX_HOME", home)
		}
		return nil, fmt.Errorf("data dir %s: lock: %w", home, err)
	}
	return f, nil
}

func splitHostPort(addr string) (string, int) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 0
	}
	port, _ := strconv.Atoi(p)
	return host, port
}

// devPreviewDomain is the dev stack's preview domain: the configured one, else
// localhost:<the API's port>, since browsers resolve every *.localhost name to loopback; none
// turns host previews off.
func devPreviewDomain(configured, apiAddr string) string {
	switch configured {
	case "none":
		return ""
	case "":
		_, port, err := net.SplitHostPort(apiAddr)
		if err != nil {
			return ""
		}
		return "localhost:" + port
	}
	return configured
}
