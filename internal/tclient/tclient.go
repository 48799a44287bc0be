// Package tclient dials Temporal from a config.Temporal, so every role (dev, api, worker, CLI
// admin commands) connects the same way: plain on loopback for the embedded server, TLS and an
// API key for a real cluster.
package tclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/loomhand/cocoonbox/internal/config"
)

// Options turns cfg into SDK client options.
func Options(cfg config.Temporal, logger *slog.Logger) (client.Options, error) {
	if cfg.Address == "" {
		return client.Options{}, errors.New("temporal address: is required")
	}
	opts := client.Options{HostPort: cfg.Address, Namespace: cfg.Namespace}
	if opts.Namespace == "" {
		opts.Namespace = config.DefaultNamespace
	}
	if logger != nil {
		opts.Logger = tlog.NewStructuredLogger(logger)
	}
	if cfg.APIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(cfg.APIKey)
	}
	if cfg.TLS || cfg.APIKey != "" || cfg.TLSCertPath != "" || cfg.TLSCAPath != "" {
		tc, err := tlsConfig(cfg)
		if err != nil {
			return client.Options{}, err
		}
		opts.ConnectionOptions.TLS = tc
	}
	return opts, nil
}

// Dial connects to Temporal and checks that the frontend answers.
func Dial(ctx context.Context, cfg config.Temporal, logger *slog.Logger) (client.Client, error) {
	opts, err := Options(cfg, logger)
	if err != nil {
		return nil, err
	}
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("dial temporal %s: %w", cfg.Address, err)
	}
	return c, nil
}

// Lazy returns a client that connects on first use and again after the frontend comes back, so a
// role can start while Temporal is down; its calls fail as unavailable meanwhile.
func Lazy(cfg config.Temporal, logger *slog.Logger) (client.Client, error) {
	opts, err := Options(cfg, logger)
	if err != nil {
		return nil, err
	}
	c, err := client.NewLazyClient(opts)
	if err != nil {
		return nil, fmt.Errorf("temporal %s: %w", cfg.Address, err)
	}
	return c, nil
}

// Ping returns a check that the frontend answers, for health reports and startup waits.
func Ping(c client.Client) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err
	}
}

func tlsConfig(cfg config.Temporal) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.TLSServerName}
	if cfg.TLSCertPath != "" || cfg.TLSKeyPath != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertPath, cfg.TLSKeyPath)
		if err != nil {
			return nil, fmt.Errorf("temporal tls client cert: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if cfg.TLSCAPath != "" {
		pem, err := os.ReadFile(cfg.TLSCAPath)
		if err != nil {
			return nil, fmt.Errorf("temporal tls server ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("temporal tls server ca: no certificates in %s", cfg.TLSCAPath)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}
