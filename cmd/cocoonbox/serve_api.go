package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"go.temporal.io/sdk/client"

	"github.com/loomhand/cocoonbox/internal/api"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/buildinfo"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/tclient"
	"github.com/loomhand/cocoonbox/internal/vault"
)

func serveAPICommand() *cli.Command {
	return &cli.Command{
		Name:  "api",
		Usage: "serve the public API (gRPC, Connect/JSON, MCP at /mcp, /healthz, /metrics) on one port",
		Description: "Needs Temporal (TEMPORAL_ADDRESS), PostgreSQL (COCOONBOX_DATABASE_URL), the sandbox\n" +
			"engine for exec and files (COCOONBOX_SANDBOXD_URL, COCOONBOX_SANDBOXD_TOKEN) and the same\n" +
			"keyring as the workers (COCOONBOX_KEYRING). Box state changes go to the workers through\n" +
			"Temporal; run `cocoonbox serve worker` beside it. Binds loopback unless --listen says otherwise.",
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
	for flag, dst := range map[string]*string{
		"home": &cfg.Home, "listen": &cfg.Listen, "temporal-address": &cfg.Temporal.Address,
		"database-url": &cfg.Postgres.URL, "sandbox-url": &cfg.Sandbox.URL, "keyring": &cfg.Keyring,
		"log-level": &cfg.LogLevel,
	} {
		if c.IsSet(flag) {
			*dst = c.String(flag)
		}
	}
	if abs, err := filepath.Abs(cfg.Home); err == nil {
		cfg.Home = abs
	}
	if cfg.Keyring != "" {
		if abs, err := filepath.Abs(cfg.Keyring); err == nil {
			cfg.Keyring = abs
		}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return serveAPI(c.Context, cfg, logger, func(addr string) {
		fmt.Fprintf(c.App.Writer, "cocoonbox api: serving on http://%s (Temporal %s, engine %s)\n", addr, cfg.Temporal.Address, cfg.Sandbox.URL)
	})
}

// serveAPI connects to what cfg names and serves the API until ctx ends; ready gets the bound
// address.
func serveAPI(ctx context.Context, cfg config.API, logger *slog.Logger, ready func(addr string)) error {
	keys, err := secrets.LoadOrCreateKeyring(cfg.KeyringPath())
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.Postgres.URL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer st.Close()
	tc, err := tclient.Dial(ctx, cfg.Temporal, logger.With("component", "temporal-client"))
	if err != nil {
		return err
	}
	defer tc.Close()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	boxes := &boxsvc.Service{
		Temporal: tc, Store: st, Policy: boxsvc.DefaultPolicy,
		Link: &boxlink.Link{
			Sandbox: sandbox.NewHTTP(cfg.Sandbox.URL, cfg.Sandbox.Token, nil),
			Tokens:  store.SandboxTokens{Store: st, Keys: keys},
			// The same derivation as the workers', from the deployment's shared keyring.
			Credentials: boxlink.Credentials(keys),
		},
		Logger: logger.With("component", "boxsvc"),
		Agent:  cfg.Agent,
		Quota:  cfg.Quota,
	}
	srv := api.New(api.Options{
		Store: st, Boxes: boxes, Vault: &vault.Vault{Store: st, Keys: keys}, Keys: keys,
		Version: buildinfo.String(), Logger: logger.With("component", "api"),
		MaxDesktopConns: cfg.MaxDesktopConnections,
		Checks: map[string]api.Check{
			"temporal": func(ctx context.Context) error {
				_, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{})
				return err
			},
			"postgres": func(ctx context.Context) error { return st.Ping(ctx) },
		},
	})
	ready(ln.Addr().String())
	return srv.Serve(ctx, ln)
}
