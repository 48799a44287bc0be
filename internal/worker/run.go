package worker

import (
	"context"
	"fmt"
	"log/slog"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/tclient"
)

// Running is a worker started from a config.Worker with the connections it opened.
type Running struct {
	w     sdkworker.Worker
	hooks func() // stops the webhook dispatcher and the reconciler
	st    *store.Store
	tc    client.Client
}

// Start validates cfg, connects to everything it names (keyring, PostgreSQL, Temporal, S3, the
// sandbox engine) and starts polling. `cocoonbox serve worker` and the tests that run a worker
// in its own process both start it here; interceptors wrap what it runs (see Options).
func Start(ctx context.Context, cfg config.Worker, logger *slog.Logger, interceptors ...interceptor.WorkerInterceptor) (_ *Running, retErr error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	keys, err := secrets.LoadOrCreateKeyring(cfg.KeyringPath())
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, cfg.Postgres.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	defer func() {
		if retErr != nil {
			st.Close()
		}
	}()
	tc, err := tclient.Dial(ctx, cfg.Temporal, logger.With("component", "temporal-client"))
	if err != nil {
		return nil, err
	}
	blobs, err := objstore.NewS3(ctx, objstore.Config{
		Endpoint: cfg.S3.Endpoint, Region: cfg.S3.Region, Bucket: cfg.S3.Bucket,
		AccessKey: cfg.S3.AccessKey, SecretKey: cfg.S3.SecretKey, PathStyle: cfg.S3.PathStyle,
	}, nil)
	if err != nil {
		tc.Close()
		return nil, fmt.Errorf("s3: %w", err)
	}
	engine := sandbox.NewHTTP(cfg.Sandbox.URL, cfg.Sandbox.Token, nil)
	w := New(Options{
		Temporal: tc, Store: st, Sandbox: engine,
		Keys: keys, Template: cfg.Template, Blobs: blobs,
		UploadRate: int64(cfg.SnapshotUploadMiBps) << 20, Gateway: StaticGateway(cfg.Agent),
		Logger: logger.With("component", "worker"), WebhooksAllowPrivate: cfg.Webhooks.AllowPrivate,
		Interceptors: interceptors,
	})
	if err := w.Start(); err != nil {
		tc.Close()
		return nil, fmt.Errorf("worker: %w", err)
	}
	hooks := StartDispatcher(&Dispatcher{Temporal: tc, Store: st, RetryFirst: cfg.Webhooks.RetryFirst, Logger: logger.With("component", "webhooks")})
	rec := StartReconciler(&Reconciler{Temporal: tc, Store: st, Engine: engine, Logger: logger.With("component", "reconciler")})
	return &Running{w: w, hooks: func() { rec(); hooks() }, st: st, tc: tc}, nil
}

// Stop stops polling, waits for running activities to return (a killed worker's are retried
// elsewhere after their heartbeat timeout) and closes the connections.
func (r *Running) Stop() {
	r.hooks()
	r.w.Stop()
	r.tc.Close()
	r.st.Close()
}
