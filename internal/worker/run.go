package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/buildinfo"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/health"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/tclient"
	"github.com/loomhand/cocoonbox/workflows"
)

// Running is a worker started from a config.Worker with the connections it opened.
type Running struct {
	w      *Worker
	hooks  func() // stops the webhook dispatcher and the reconciler
	st     *store.Store
	tc     client.Client
	health *http.Server // nil when cfg.HealthListen is off
	addr   string       // the health listener's address
}

// Start validates cfg, connects to everything it names (keyring, PostgreSQL, Temporal, S3, the
// sandbox engine) and starts polling. It serves /healthz and /metrics on cfg.HealthListen first
// and waits there, reporting "starting", while PostgreSQL or Temporal does not answer, so a
// worker started before its dependencies comes up when they do; it returns early only when
// ctx ends or cfg is wrong. `cocoonbox serve worker` and the tests that run a worker in its own
// process both start it here; interceptors wrap what it runs (see Options).
func Start(ctx context.Context, cfg config.Worker, logger *slog.Logger, interceptors ...interceptor.WorkerInterceptor) (_ *Running, retErr error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	keys, err := secrets.LoadKeyring(cfg.KeyringPath())
	if err != nil {
		return nil, err
	}
	st, err := store.Connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	r := &Running{st: st}
	defer func() {
		if retErr != nil {
			r.close()
		}
	}()
	if r.tc, err = tclient.Lazy(cfg.Temporal, logger.With("component", "temporal-client")); err != nil {
		return nil, err
	}
	blobs, err := objstore.NewS3(ctx, objstore.Config{
		Endpoint: cfg.S3.Endpoint, Region: cfg.S3.Region, Bucket: cfg.S3.Bucket,
		AccessKey: cfg.S3.AccessKey, SecretKey: cfg.S3.SecretKey, PathStyle: cfg.S3.PathStyle,
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("s3: %w", err)
	}
	engine := sandbox.NewHTTP(cfg.Sandbox.URL, cfg.Sandbox.Token, nil)

	var start health.Startup
	checker := &health.Checker{Version: buildinfo.String(), Starting: start.Err, Checks: map[string]health.Check{
		"postgres": st.Ping,
		"temporal": tclient.Ping(r.tc),
		"s3":       blobs.Check,
		"engine": func(ctx context.Context) error {
			_, err := engine.Info(ctx)
			return err
		},
	}}
	if cfg.HealthListen != config.HealthOff {
		if err := r.serveHealth(cfg.HealthListen, checker, logger); err != nil {
			return nil, err
		}
	}
	// PostgreSQL first: its schema must be current before anything queries it.
	if err := start.Wait(ctx, logger, "PostgreSQL", st.Migrate); err != nil {
		return nil, err
	}
	if err := start.Wait(ctx, logger, "Temporal", tclient.Ping(r.tc)); err != nil {
		return nil, err
	}
	if err := CheckSearchAttributes(ctx, r.tc, cfg.Temporal.Namespace, logger); err != nil {
		return nil, err
	}
	w := New(Options{
		Temporal: r.tc, Store: st, Sandbox: engine,
		Keys: keys, Template: cfg.Template, Blobs: blobs,
		UploadRate: int64(cfg.SnapshotUploadMiBps) << 20, Gateway: StaticGateway(cfg.Agent),
		Logger: logger.With("component", "worker"), WebhooksAllowPrivate: cfg.Webhooks.AllowPrivate,
		Interceptors: interceptors, NodeDeadAfter: cfg.NodeDeadAfter, Node: cfg.Node,
	})
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	start.Done()
	r.w = w
	hooks := StartDispatcher(&Dispatcher{Temporal: r.tc, Store: st, RetryFirst: cfg.Webhooks.RetryFirst, Logger: logger.With("component", "webhooks")})
	rec := StartReconciler(&Reconciler{Temporal: r.tc, Store: st, Engine: engine, Logger: logger.With("component", "reconciler")})
	keep := StartRecordingRetention(&RecordingRetention{Store: st, Blobs: blobs, Keep: cfg.Recordings, Logger: logger.With("component", "recordings")})
	beat := func() {}
	if cfg.Node != "" {
		tc := r.tc
		beat = StartHeartbeat(&Heartbeat{Store: st, Engine: engine, Node: nodes.Node{ID: cfg.Node, URL: cfg.Sandbox.URL},
			DeadAfter: cfg.NodeDeadAfter, Logger: logger.With("component", "heartbeat"),
			TellLost: func(ctx context.Context, box cocoonbox.BoxID, sandboxID, node string) error {
				return workflows.SandboxLost(ctx, tc, box, sandboxID, node)
			}})
	}
	reseal := StartResealer(&Resealer{Store: st, Keys: keys, Logger: logger.With("component", "reseal")})
	r.hooks = func() { beat(); rec(); keep(); hooks(); reseal() }
	return r, nil
}

// HealthAddr returns the address /healthz and /metrics are served on, or "" when they are off.
func (r *Running) HealthAddr() string { return r.addr }

// serveHealth serves checker's result on addr: /healthz as JSON with every component (503 unless
// all answer) and /metrics as Prometheus gauges. Neither needs a token, which is why the
// listener defaults to loopback.
func (r *Running) serveHealth(addr string, checker *health.Checker, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("config health_listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, req *http.Request) {
		health.WriteJSON(w, checker.Report(req.Context()))
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		health.WriteMetrics(w, checker.Report(req.Context()))
	})
	r.addr = ln.Addr().String()
	r.health = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := r.health.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("health listener stopped", "addr", r.addr, "err", err)
		}
	}()
	return nil
}

// Stop stops polling, waits for running activities to return (a killed worker's are retried
// elsewhere after their heartbeat timeout) and closes the connections.
func (r *Running) Stop() {
	r.hooks()
	r.w.Stop()
	r.close()
}

// close closes what Start opened.
func (r *Running) close() {
	if r.health != nil {
		_ = r.health.Close()
	}
	if r.tc != nil {
		r.tc.Close()
	}
	r.st.Close()
}
