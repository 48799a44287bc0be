package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/urfave/cli/v2"

	"github.com/loomhand/cocoonbox/internal/app"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/health"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/tclient"
)

func serveAPICommand() *cli.Command {
	return &cli.Command{
		Name:  "api",
		Usage: "serve the public API (gRPC, Connect/JSON, MCP at /mcp, /healthz, /metrics) on one port",
		Description: "Needs Temporal (TEMPORAL_ADDRESS), PostgreSQL (COCOONBOX_DATABASE_URL), the sandbox\n" +
			"engine for exec and files (COCOONBOX_SANDBOXD_URL, COCOONBOX_SANDBOXD_TOKEN) and the same\n" +
			"keyring as the workers (COCOONBOX_KEYRING). Box state changes go to the workers through\n" +
			"Temporal; run `cocoonbox serve worker` beside it. Binds loopback unless --listen says otherwise.\n" +
			"Listens at once and waits for PostgreSQL and Temporal, answering \"starting\" meanwhile.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "home", Usage: "data dir (default ~/.local/share/cocoonbox)"},
			&cli.StringFlag{Name: "listen", Usage: "host:port (default " + config.DefaultAPIListen + ")"},
			&cli.StringFlag{Name: "temporal-address", Usage: "Temporal frontend host:port (default " + config.DefaultTemporalListen + ")"},
			&cli.StringFlag{Name: "database-url", Usage: "PostgreSQL URL"},
			&cli.StringFlag{Name: "sandbox-url", Usage: "sandbox engine URL, e.g. http://127.0.0.1:7777"},
			&cli.StringFlag{Name: "keyring", Usage: "master key file (default <home>/keys/master.key)"},
			&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error"},
		},
		Action: runServeAPI,
	}
}

func runServeAPI(c *cli.Context) error {
	cfg, err := config.Load(c.String("config"), config.Env(), config.DefaultAPI(config.Env()))
	if err != nil {
		return err
	}
	logger, err := loadRole(c, role{
		strings: map[string]*string{
			"home": &cfg.Home, "listen": &cfg.Listen, "temporal-address": &cfg.Temporal.Address,
			"database-url": &cfg.Postgres.URL, "sandbox-url": &cfg.Sandbox.URL, "keyring": &cfg.Keyring,
			"log-level": &cfg.LogLevel,
		},
		paths: []*string{&cfg.Home, &cfg.Keyring}, level: &cfg.LogLevel, check: cfg.Validate,
	})
	if err != nil {
		return err
	}
	return serveAPI(c.Context, cfg, logger, func(addr string) {
		fmt.Fprintf(c.App.Writer, "cocoonbox api: serving on http://%s (Temporal %s, engine %s)\n", addr, cfg.Temporal.Address, cfg.Sandbox.URL)
	})
}

// serveAPI serves the API until ctx ends; ready gets the bound address once it serves. It
// listens at once and waits for PostgreSQL and Temporal meanwhile, answering "starting" instead
// of exiting, so a role started beside its dependencies (or before them) needs no restart.
func serveAPI(ctx context.Context, cfg config.API, logger *slog.Logger, ready func(addr string)) error {
	keys, err := secrets.LoadKeyring(cfg.KeyringPath())
	if err != nil {
		return err
	}
	st, err := store.Connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer st.Close()
	tc, err := tclient.Lazy(cfg.Temporal, logger.With("component", "temporal-client"))
	if err != nil {
		return err
	}
	defer tc.Close()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	parts := app.Parts{
		Temporal: tc, Store: st, Keys: keys, Logger: logger,
		Sandbox: sandbox.NewHTTP(cfg.Sandbox.URL, cfg.Sandbox.Token, nil),
	}
	var start health.Startup
	boxes := app.Boxes(parts, cfg.Agent, cfg.Quota, cfg.BoxNetwork, cfg.BoxPolicy)
	boxes.CreateWait = cfg.CreateWait
	if cfg.S3.Bucket != "" {
		if boxes.Recordings, err = objstore.NewS3(ctx, objstore.Config{
			Endpoint: cfg.S3.Endpoint, Region: cfg.S3.Region, Bucket: cfg.S3.Bucket,
			AccessKey: cfg.S3.AccessKey, SecretKey: cfg.S3.SecretKey, PathStyle: cfg.S3.PathStyle,
		}, nil); err != nil {
			return fmt.Errorf("s3: %w", err)
		}
	}
	srv := app.API(parts, boxes, app.APIOptions{
		MaxDesktopConns: cfg.MaxDesktopConnections, PreviewDomain: cfg.PreviewDomain, Starting: start.Err,
	})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	// PostgreSQL first: its schema must be current before anything queries it.
	if err := start.Wait(ctx, logger, "PostgreSQL", st.Migrate); err != nil {
		return <-served // ctx ended while waiting: Serve returns once it has shut down
	}
	if err := start.Wait(ctx, logger, "Temporal", tclient.Ping(tc)); err != nil {
		return <-served
	}
	start.Done()
	ready(ln.Addr().String())
	return <-served
}
