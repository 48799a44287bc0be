package main

import (
	"fmt"
	"log/slog"
	"net"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/images"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
)

// serveCommand groups the server roles run one per process; each role adds its subcommand here.
func serveCommand() *cli.Command {
	return &cli.Command{
		Name:            "serve",
		Usage:           "run one server role",
		Subcommands:     []*cli.Command{serveAPICommand(), serveEngineCommand(), serveWorkerCommand()},
		HideHelpCommand: true,
	}
}

func serveEngineCommand() *cli.Command {
	return &cli.Command{
		Name:  "engine",
		Usage: "run the local sandbox engine (the sandboxd API over gVisor boxes)",
		Description: "Records live under --home/engine; a restart re-adopts every box. A root token is\n" +
			"required (prefer COCOONBOX_ENGINE_TOKEN to --root-token: a flag shows in the process list).\n" +
			"The process runtime has no sandbox: it serves one user (no tenant tokens) and needs\n" +
			"--insecure-no-isolation.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "home", Usage: "data dir (default ~/.local/share/cocoonbox)"},
			&cli.StringFlag{Name: "listen", Usage: "API address (default 127.0.0.1:7777)"},
			&cli.StringFlag{Name: "root-token", Usage: "operator token (required unless --insecure-no-token)"},
			&cli.BoolFlag{Name: "insecure-no-token", Usage: "run without a root token, node endpoints open (loopback --listen only)"},
			&cli.StringFlag{Name: "runtime", Usage: "gvisor, process or auto (gvisor, else a startup error)"},
			&cli.BoolFlag{Name: "insecure-no-isolation", Usage: "allow --runtime process: boxes on the host kernel, no sandbox"},
			&cli.IntFlag{Name: "max-sandboxes", Usage: "most boxes this engine runs (default: one per 512 MiB of host memory beyond 1 GiB)"},
			&cli.IntFlag{Name: "box-disk-mb", Usage: "disk quota of each box, in MiB (default: the size's, 10 GiB for small, doubling with each size)"},
			&cli.StringFlag{Name: "network-uplink", Usage: "interface boxes on the egress lane reach the internet through, or auto for the default route's (default: none, no box has a network)"},
			&cli.StringFlag{Name: "network-uplink-netns", Usage: "network namespace holding the uplink and routing for the boxes (default: the host's, which then forwards IPv4)"},
			&cli.StringFlag{Name: "network-pool", Usage: "IPv4 CIDR box addresses come from, a /30 each (default 10.88.0.0/16)"},
			&cli.StringFlag{Name: "network-dns", Usage: "resolvers boxes use, comma-separated (default: the host's non-loopback ones)"},
			&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error"},
		},
		Action: runServeEngine,
	}
}

func runServeEngine(c *cli.Context) error {
	cfg, err := config.Load(c.String("config"), config.Env(), config.DefaultEngine(config.Env()))
	if err != nil {
		return err
	}
	logger, err := loadRole(c, role{
		strings: map[string]*string{
			"home": &cfg.Home, "listen": &cfg.Listen, "root-token": &cfg.RootToken,
			"runtime": &cfg.Runtime, "log-level": &cfg.LogLevel,
			"network-uplink": &cfg.Network.Uplink, "network-uplink-netns": &cfg.Network.UplinkNetns,
			"network-pool": &cfg.Network.Pool, "network-dns": &cfg.Network.DNS,
		},
		bools: map[string]*bool{"insecure-no-token": &cfg.InsecureNoToken, "insecure-no-isolation": &cfg.InsecureNoIsolation},
		ints:  map[string]*int{"max-sandboxes": &cfg.MaxSandboxes, "box-disk-mb": &cfg.BoxDiskMB},
		paths: []*string{&cfg.Home}, level: &cfg.LogLevel, check: cfg.Validate,
	})
	if err != nil {
		return err
	}

	dir := filepath.Join(cfg.Home, "engine")
	rt, err := newEngineRuntime(cfg.Runtime, cfg.InsecureNoIsolation, cfg.Network, dir, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	defer ln.Close()
	if cfg.InsecureNoToken {
		logger.Warn("the engine runs without a root token: node endpoints are open to every local user", "listen", cfg.Listen)
	}
	e, err := engine.New(engine.Options{
		Dir: dir, Runtime: rt, Images: images.Resolver(cfg.ImageCache), RootToken: cfg.RootToken,
		Logger: logger, OwnerAddr: ln.Addr().String(), MaxSandboxes: cfg.MaxSandboxes, MemoryOvercommit: cfg.MemoryOvercommit,
		BoxDiskMB: cfg.BoxDiskMB,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "cocoonbox engine: serving on http://%s (runtime %s, isolation %s, data %s)\n",
		ln.Addr(), rt.Name(), rt.Capabilities().Isolation, dir)
	serr := e.Serve(c.Context, ln)
	if err := e.Close(); serr == nil {
		serr = err
	}
	return serr
}

// newEngineRuntime builds the runtime --runtime names; "auto" is the runtime package's own
// choice (gvisor where runsc can start a sandbox here, else an error saying why). Its state
// lives next to the engine's records so a restart finds both.
func newEngineRuntime(kind string, noIsolation bool, nc config.Network, dir string, logger *slog.Logger) (runtime.Runtime, error) {
	if kind == "auto" {
		kind = ""
	}
	network, err := runtime.ParseNetwork(runtime.NetworkConfig{Uplink: nc.Uplink, UplinkNetns: nc.UplinkNetns, Pool: nc.Pool, DNS: nc.DNS})
	if err != nil {
		return nil, err
	}
	return runtime.New(kind, runtime.Options{DataDir: filepath.Join(dir, "runtime"), Logger: logger,
		InsecureNoIsolation: noIsolation, Network: network})
}
