package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
)

func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "run the whole system on this machine: Temporal, PostgreSQL, S3, the sandbox engine and the API",
		Description: "State lives under --home (COCOONBOX_HOME); stopping and starting keeps every user, box,\n" +
			"snapshot and workflow; running boxes are hibernated on stop and wake on their next use. Set\n" +
			"TEMPORAL_ADDRESS, COCOONBOX_DATABASE_URL, COCOONBOX_S3_ENDPOINT\n" +
			"or COCOONBOX_SANDBOXD_URL to use an external Temporal, PostgreSQL, S3 or sandboxd instead of\n" +
			"the embedded one.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "home", Usage: "data dir (default ~/.local/share/cocoonbox)"},
			&cli.StringFlag{Name: "listen", Usage: "API address (default " + config.DefaultAPIListen + ")"},
			&cli.StringFlag{Name: "temporal-listen", Usage: "embedded Temporal frontend (default " + config.DefaultTemporalListen + ")"},
			&cli.StringFlag{Name: "temporal-ui-listen", Usage: "embedded Temporal UI (default " + config.DefaultTemporalUIListen + ")"},
			&cli.StringFlag{Name: "s3-listen", Usage: "embedded S3 server (default " + config.DefaultS3Listen + ")"},
			&cli.StringFlag{Name: "engine-listen", Usage: "local sandbox engine (default " + config.DefaultEngineListen + ")"},
			&cli.StringFlag{Name: "engine-runtime", Usage: "auto, gvisor or process (default auto: gvisor, else a startup error)"},
			&cli.BoolFlag{Name: "engine-insecure-no-isolation", Usage: "allow --engine-runtime process: boxes on the host kernel, no sandbox"},
			&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error"},
		},
		Action: runDev,
	}
}

func runDev(c *cli.Context) error {
	cfg, err := config.LoadDev(c.String("config"), config.Env())
	if err != nil {
		return err
	}
	for flag, dst := range map[string]*string{
		"home": &cfg.Home, "listen": &cfg.Listen, "temporal-listen": &cfg.TemporalListen,
		"temporal-ui-listen": &cfg.TemporalUIListen, "s3-listen": &cfg.S3Listen, "log-level": &cfg.LogLevel,
		"engine-listen": &cfg.EngineListen, "engine-runtime": &cfg.EngineRuntime,
	} {
		if c.IsSet(flag) {
			*dst = c.String(flag)
		}
	}
	if c.IsSet("engine-insecure-no-isolation") {
		cfg.EngineInsecureNoIsolation = c.Bool("engine-insecure-no-isolation")
	}
	// Absolute paths before anything starts: the embedded S3 server changes the process's working
	// directory (versitygw's posix backend resolves buckets relative to it).
	for _, p := range []*string{&cfg.Home, &cfg.CLIConfig} {
		if abs, err := filepath.Abs(*p); err == nil {
			*p = abs
		}
	}
	self := selfPath()
	if err := cfg.Validate(); err != nil {
		return err
	}
	netNote := devNetwork(&cfg)
	logger, closeLog, err := devLogger(cfg)
	if err != nil {
		return err
	}
	defer closeLog()

	out := c.App.Writer
	fmt.Fprintf(out, "cocoonbox dev: starting (data dir %s)\n", cfg.Home)
	start := time.Now()
	d, err := devstack.Start(c.Context, cfg, logger)
	if err != nil {
		return err
	}
	printReady(out, d, time.Since(start), self)
	fmt.Fprintf(out, "  Network      %s\n", netNote)

	select {
	case <-c.Context.Done():
		fmt.Fprintln(out, "cocoonbox dev: stopping")
	case <-d.Done():
		_ = d.Close()
		return d.Err()
	}
	if err := d.Close(); err != nil {
		return err
	}
	fmt.Fprintln(out, "cocoonbox dev: stopped")
	return nil
}

// devNetwork gives the dev stack's boxes the internet through the host's default route unless the
// configuration says otherwise (engine_network.uplink: none, or an interface), and returns the
// line the banner prints about it. Where the host has no default route or no resolver a box can
// use, boxes get no network and the line says why: the stack still starts.
func devNetwork(cfg *config.Dev) string {
	nc := cfg.EngineNetwork
	switch {
	case cfg.Sandbox.URL != "":
		return "as the external sandbox engine gives it"
	case nc.Uplink == "none":
		return "none: boxes reach nothing (engine_network.uplink is none)"
	case nc.Uplink != "":
		return "boxes reach the internet through " + nc.Uplink + " (new boxes: " + cfg.DefaultBoxNetwork() + ")"
	}
	n, err := runtime.ParseNetwork(runtime.NetworkConfig{Uplink: "auto", Pool: nc.Pool, DNS: nc.DNS})
	if err != nil {
		return "none: " + err.Error() + "; set engine_network.uplink and dns"
	}
	cfg.EngineNetwork.Uplink = n.Uplink
	return "boxes reach the internet through " + n.Uplink + ", NATed, never the host or private ranges (new boxes: " + cfg.DefaultBoxNetwork() + ")"
}

func printReady(w io.Writer, d *devstack.Dev, took time.Duration, self string) {
	u, b := d.URLs(), d.Bootstrap()
	fmt.Fprintf(w, "cocoonbox dev: ready in %s\n\n", took.Round(10*time.Millisecond))
	fmt.Fprintf(w, "  API          %s   (gRPC; health at %s/healthz)\n", u.API, u.API)
	if u.TemporalUI != "" {
		fmt.Fprintf(w, "  Temporal UI  %s%s\n", u.TemporalUI, uiLoginNote(d.TemporalUIToken()))
	}
	printTemporal(w, u.Temporal, d.TemporalClient())
	fmt.Fprintf(w, "  S3           %s\n", u.S3)
	fmt.Fprintf(w, "  Engine       %s   (sandboxd API; root token in the data dir's engine/root-token)\n", u.Engine)
	switch level, sandboxed := d.EngineIsolation(); {
	case level == "":
		fmt.Fprintf(w, "  Isolation    external sandboxd's own\n\n")
	case sandboxed:
		fmt.Fprintf(w, "  Isolation    %s\n\n", level)
	default:
		fmt.Fprintf(w, "  Isolation    %s\n  WARNING      boxes run on the host kernel with no sandbox: for one user, never for others\n\n", level)
	}
	switch {
	case b.CreatedUser:
		fmt.Fprintf(w, "  Created user %q and wrote its token to %s\n", b.UserName, b.CLIConfig)
	case b.CreatedToken:
		fmt.Fprintf(w, "  Wrote a new token for %q to %s\n", b.UserName, b.CLIConfig)
	default:
		fmt.Fprintf(w, "  User %q; CLI config %s\n", b.UserName, b.CLIConfig)
	}
	fmt.Fprintf(w, "  Try: %s whoami\n\n  Press Ctrl-C to stop; state is kept for the next start.\n", self)
}

func uiLoginNote(tokenPath string) string {
	if tokenPath == "" {
		return "   (no login: temporal_insecure)"
	}
	return "   (log in with the token in " + tokenPath + ")"
}

// printTemporal says where Temporal answers and, for the embedded server's mutual TLS, the
// settings a client needs, in the SDK's environment names (the temporal CLI reads them too).
func printTemporal(w io.Writer, addr string, tc config.Temporal) {
	if tc.TLSCertPath == "" {
		fmt.Fprintf(w, "  Temporal     %s\n", addr)
		return
	}
	fmt.Fprintf(w, "  Temporal     %s   (mutual TLS; clients set:)\n", addr)
	for _, kv := range [][2]string{
		{"TEMPORAL_TLS_SERVER_CA_CERT_PATH", tc.TLSCAPath}, {"TEMPORAL_TLS_CLIENT_CERT_PATH", tc.TLSCertPath},
		{"TEMPORAL_TLS_CLIENT_KEY_PATH", tc.TLSKeyPath}, {"TEMPORAL_TLS_SERVER_NAME", tc.TLSServerName},
	} {
		fmt.Fprintf(w, "               %s=%s\n", kv[0], kv[1])
	}
}

// selfPath is how the person can run this binary again from their current directory.
func selfPath() string {
	exe, err := os.Executable()
	if err != nil {
		return "cocoonbox"
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, exe); err == nil && !strings.HasPrefix(rel, "..") {
			return rel
		}
	}
	return exe
}

// devLogger writes the dev stack's log to <home>/cocoonbox.log so the terminal shows only what a
// person needs; warnings and errors are also echoed to stderr.
func devLogger(cfg config.Dev) (*slog.Logger, func(), error) {
	if err := os.MkdirAll(cfg.Home, 0o700); err != nil {
		return nil, nil, fmt.Errorf("data dir %s: cannot create it: %w", cfg.Home, err)
	}
	path := filepath.Join(cfg.Home, "cocoonbox.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("data dir %s: not writable: %w", cfg.Home, err)
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	file := slog.NewJSONHandler(f, &slog.HandlerOptions{Level: level})
	stderr := slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	return slog.New(slog.NewMultiHandler(file, stderr)), func() { _ = f.Close() }, nil
}
