package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/worker"
)

// Defaults for TemporalOptions.
const (
	// DefaultTemporalHost keeps the dev server off the network unless asked.
	DefaultTemporalHost = "127.0.0.1"
	// DefaultTemporalNamespace is the namespace SDK clients use when none is configured.
	DefaultTemporalNamespace = "default"
	// DefaultTemporalRetention keeps closed workflows for a week: long enough to look back at
	// last week's agent runs in the UI, short enough that the SQLite file does not grow forever.
	DefaultTemporalRetention = 7 * 24 * time.Hour
	// NoUI as TemporalOptions.UIPort starts no Web UI.
	NoUI = -1
)

// startTimeout bounds the wait for the server to answer and accept the namespace when the
// caller's context has no deadline. A warm start takes about a second.
const startTimeout = time.Minute

// TemporalOptions configures the embedded Temporal dev server.
type TemporalOptions struct {
	// DataDir holds temporal.db (SQLite), temporal.log and temporal.lock. Created if missing.
	DataDir string
	// Host is the IP the frontend binds; default "127.0.0.1". The other services always bind
	// loopback.
	Host string
	// Port is the frontend gRPC port; 0 picks a free one.
	Port int
	// UIPort is the Web UI port on loopback; 0 picks a free one, NoUI (-1) disables the UI.
	UIPort int
	// Namespace is registered at start; default "default".
	Namespace string
	// Retention applies to Namespace, on registration and on later starts when it differs;
	// default DefaultTemporalRetention.
	Retention time.Duration
	// SearchAttributes are added to Namespace at start when missing. An existing attribute of
	// another type is an error, since Temporal cannot change a search attribute's type.
	SearchAttributes map[string]enumspb.IndexedValueType
	// Logger receives the server's warnings and errors, untagged (callers add their own
	// component attribute). Nil writes them as JSON to DataDir/temporal.log.
	Logger *slog.Logger `json:"-"`
	// Insecure serves the frontend and the internal services as plain gRPC and the UI without
	// login. Only for a loopback Host: anyone who reaches an insecure frontend can start any
	// workflow and read every history. By default every listener takes only callers with a
	// certificate from the CA in DataDir/tls, and the UI asks for the token in DataDir/ui-token.
	Insecure bool
}

// Temporal is a running embedded Temporal server with its Web UI.
type Temporal struct {
	opts    TemporalOptions
	addr    string
	ports   servicePorts
	server  temporal.Server
	tls     *serverTLS // nil when Insecure
	logger  *serverLogger
	ui      *webUI
	conn    *grpc.ClientConn
	logFile *os.File
	lock    *os.File
	// dc is the server's dynamic config; settling is the timer that turns a setting of it
	// off once the search attributes are everywhere (searchAttributesSettled).
	dc       *dynamicconfig.MemoryClient
	settling *time.Timer

	stopOnce sync.Once
	stopErr  error
}

// StartTemporal starts the server, registers the namespace and its search attributes, starts
// the Web UI and returns once all of them answer. State persists in opts.DataDir: a later start
// on the same dir sees the same namespaces, workflows and histories.
func StartTemporal(ctx context.Context, opts TemporalOptions) (_ *Temporal, retErr error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	// The server's own workers (its scanners) would have the SDK read the whole executable to
	// hash a checksum: about half a second of CPU at every start of the server.
	sdkworker.SetBinaryChecksum(worker.BuildName())
	frontendBind, frontendDial, err := bindIP(opts.Host)
	if err != nil {
		return nil, err
	}
	if err := prepareDataDir(opts.DataDir); err != nil {
		return nil, err
	}

	t := &Temporal{opts: opts}
	defer func() {
		if retErr != nil {
			_ = t.stop()
		}
	}()
	if t.lock, err = lockDataDir(opts.DataDir); err != nil {
		return nil, err
	}

	// Check every port before the server starts: the server cannot report a bind failure
	// as an error, and this way the message names the port.
	var res reservation
	defer res.release()
	var ports servicePorts
	if ports.frontend, err = res.reserve("temporal frontend", frontendBind, opts.Port); err != nil {
		return nil, err
	}
	for _, p := range []*int{&ports.history, &ports.matching, &ports.worker} {
		if *p, err = res.reserve("temporal internal service", loopback, 0); err != nil {
			return nil, err
		}
	}
	var uiLn net.Listener // served by the UI server, which closes it at stop
	defer func() {
		if uiLn != nil && t.ui == nil {
			_ = uiLn.Close()
		}
	}()
	if opts.UIPort != NoUI {
		addr := net.JoinHostPort(loopback, strconv.Itoa(opts.UIPort))
		if uiLn, err = net.Listen("tcp", addr); err != nil {
			return nil, listenError("temporal ui", addr, err)
		}
	}
	t.addr = net.JoinHostPort(frontendDial, strconv.Itoa(ports.frontend))
	t.ports = ports

	logger, logFile, err := newLogger(opts, filepath.Join(opts.DataDir, "temporal.log"))
	if err != nil {
		return nil, err
	}
	t.logFile = logFile

	dbPath := filepath.Join(opts.DataDir, "temporal.db")
	if err := prepareSQLite(ctx, dbPath); err != nil {
		return nil, err
	}

	creds := insecure.NewCredentials()
	if !opts.Insecure {
		if t.tls, err = loadOrCreateTLS(filepath.Join(opts.DataDir, tlsDirName), time.Now()); err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(t.tls.clientConfig())
	}
	var login *uiLogin
	if uiLn != nil && !opts.Insecure {
		path := filepath.Join(opts.DataDir, uiTokenFile)
		token, err := loadOrCreateSecret(path)
		if err != nil {
			return nil, fmt.Errorf("temporal ui token: %w", err)
		}
		login = &uiLogin{token: token, tokenPath: path}
	}

	res.release()
	t.dc = dynamicConfig()
	slogger := newServerLogger(logger)
	t.logger = slogger
	serverOpts := []temporal.ServerOption{
		temporal.WithConfig(serverConfig(dbPath, frontendBind, t.addr, ports)),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(staticHosts(t.addr, ports)),
		temporal.WithLogger(slogger),
		temporal.WithDynamicConfigClient(t.dc),
	}
	if t.tls != nil {
		serverOpts = append(serverOpts, temporal.WithTLSConfigFactory(t.tls.provider()))
	}
	if t.server, err = startServer(slogger, serverOpts...); err != nil {
		return nil, err
	}

	if t.conn, err = grpc.NewClient(t.addr, grpc.WithTransportCredentials(creds)); err != nil {
		return nil, fmt.Errorf("dial temporal frontend: %w", err)
	}
	readyCtx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		readyCtx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	if err := t.register(readyCtx); err != nil {
		return nil, err
	}

	if uiLn != nil {
		ui, err := startUI(readyCtx, uiOptions{
			listener: uiLn, frontendAddr: t.addr, namespace: opts.Namespace, tls: t.tls, login: login,
		})
		if err != nil {
			return nil, err
		}
		t.ui = ui
	}
	return t, nil
}

func (o TemporalOptions) withDefaults() (TemporalOptions, error) {
	if o.DataDir == "" {
		return o, errors.New("start temporal: data dir is required")
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return o, fmt.Errorf("resolve temporal data dir: %w", err)
	}
	// The sqlite plugin puts the path into a file: URI unescaped.
	if strings.ContainsAny(dir, "?#%") {
		return o, fmt.Errorf("start temporal: data dir %q must not contain ?, # or %%", dir)
	}
	o.DataDir = dir
	if o.Host == "" {
		o.Host = DefaultTemporalHost
	}
	if o.Namespace == "" {
		o.Namespace = DefaultTemporalNamespace
	}
	if o.Retention == 0 {
		o.Retention = DefaultTemporalRetention
	}
	if o.Port < 0 || o.Port > 65535 {
		return o, fmt.Errorf("start temporal: frontend port %d out of range", o.Port)
	}
	if o.UIPort < NoUI || o.UIPort > 65535 {
		return o, fmt.Errorf("start temporal: ui port %d out of range", o.UIPort)
	}
	if o.Insecure && !isLoopback(o.Host) {
		return o, fmt.Errorf("start temporal: an insecure frontend must listen on loopback, not %s", o.Host)
	}
	return o, nil
}

// prepareDataDir creates dir and proves it writable now, rather than letting SQLite fail
// later with "unable to open database file".
func prepareDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create temporal data dir: %w", err)
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("write temporal data dir %s: %w", dir, unwrapPathError(err))
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	return nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// startServer builds and starts the server. A Fatal log during startup (a bind that lost a
// race for its port) arrives here as a startupFatal panic and leaves as an error.
func startServer(l *serverLogger, opts ...temporal.ServerOption) (srv temporal.Server, err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		f, ok := r.(startupFatal)
		if !ok {
			panic(r)
		}
		srv, err = nil, fmt.Errorf("start temporal server: %s", f.msg)
	}()
	srv, err = temporal.NewServer(opts...)
	if err != nil {
		return nil, fmt.Errorf("create temporal server: %w", err)
	}
	if err := srv.Start(); err != nil {
		_ = srv.Stop()
		return nil, fmt.Errorf("start temporal server: %w", err)
	}
	l.fatal.running.Store(true)
	return srv, nil
}

// Address returns the frontend's host:port for SDK clients.
func (t *Temporal) Address() string { return t.addr }

// ClientConfig is how a client outside this package dials the frontend: its address and
// namespace and, unless Insecure, the CA, client certificate and server name to use.
func (t *Temporal) ClientConfig() config.Temporal {
	c := config.Temporal{Address: t.addr, Namespace: t.opts.Namespace}
	if t.tls != nil {
		c.TLSCAPath, c.TLSCertPath, c.TLSKeyPath = t.tls.CAPath(), t.tls.ClientCertPath(), t.tls.ClientKeyPath()
		c.TLSServerName = TemporalServerName
	}
	return c
}

// UITokenPath is the file holding the Web UI's login token, or "" when the UI asks for none.
func (t *Temporal) UITokenPath() string {
	if t.ui == nil || t.tls == nil {
		return ""
	}
	return filepath.Join(t.opts.DataDir, uiTokenFile)
}

// Namespace returns the namespace registered at start.
func (t *Temporal) Namespace() string { return t.opts.Namespace }

// UIURL returns the Web UI's base URL, or "" when the UI is disabled.
func (t *Temporal) UIURL() string {
	if t.ui == nil {
		return ""
	}
	return t.ui.url
}

// Check reports whether the frontend serves and can read the namespace, which needs
// persistence too.
func (t *Temporal) Check(ctx context.Context) error {
	if err := t.checkHealth(ctx); err != nil {
		return err
	}
	_, err := workflowservice.NewWorkflowServiceClient(t.conn).DescribeNamespace(ctx,
		&workflowservice.DescribeNamespaceRequest{Namespace: t.opts.Namespace})
	if err != nil {
		return fmt.Errorf("describe namespace %s: %w", t.opts.Namespace, err)
	}
	return nil
}

// checkHealth asks the frontend's gRPC health service about the workflow service.
func (t *Temporal) checkHealth(ctx context.Context) error {
	resp, err := healthpb.NewHealthClient(t.conn).Check(ctx,
		&healthpb.HealthCheckRequest{Service: workflowservice.WorkflowService_ServiceDesc.ServiceName})
	if err != nil {
		return fmt.Errorf("check temporal health: %w", err)
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		// Unavailable, so that register waits for a frontend still starting up.
		return fmt.Errorf("check temporal health: %w", status.Errorf(codes.Unavailable, "frontend is %s", s))
	}
	return nil
}

// Stop shuts down the UI and the server and releases the data dir. Later calls return the
// first call's result.
func (t *Temporal) Stop() error {
	t.stopOnce.Do(func() { t.stopErr = t.stop() })
	return t.stopErr
}

// stop tears down whatever has been started, in reverse order; StartTemporal also uses it
// after a failed start.
func (t *Temporal) stop() error {
	var errs []error
	if t.settling != nil {
		t.settling.Stop()
	}
	if t.ui != nil {
		t.ui.stop()
	}
	if t.conn != nil {
		errs = append(errs, t.conn.Close())
	}
	if t.server != nil {
		t.logger.stopping.Store(true)
		if err := t.server.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop temporal server: %w", err))
		}
	}
	if t.logFile != nil {
		errs = append(errs, t.logFile.Close())
	}
	if t.lock != nil {
		// Closing the file drops the flock.
		errs = append(errs, t.lock.Close())
	}
	return errors.Join(errs...)
}

// operator returns an operator service client on the frontend connection.
func (t *Temporal) operator() operatorservice.OperatorServiceClient {
	return operatorservice.NewOperatorServiceClient(t.conn)
}
