package devstack

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/images"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/subproc"
)

// suspendTimeout bounds hibernating every box when the dev stack stops; an XFCE box
// checkpoints in well under a second, so this allows for many.
const suspendTimeout = 2 * time.Minute

// engineChildArg, as the first argument, runs the executable as the dev stack's engine child.
const engineChildArg = "__cocoonbox-engine-child"

func init() { subproc.Main(engineChildArg, runEngineChild) }

// localEngine is the sandbox engine `cocoonbox dev` runs as a child process when no external
// sandboxd is configured: a process of its own, as `serve engine` is, so its death is one the
// supervisor recovers from (a restart re-adopts every box, on the same socket) and never the
// whole stack's.
type localEngine struct {
	subproc.Child[engineReply]
	ln    *os.File // the listening socket, handed to every run: the address never changes
	url   string
	token string
	caps  engineReply // what the first run said of its isolation
}

// engineChildConfig is what the engine child runs with; it travels over stdin, root token and all.
type engineChildConfig struct {
	Dir                 string                `json:"dir"`
	Runtime             string                `json:"runtime"` // "" picks gVisor
	InsecureNoIsolation bool                  `json:"insecure_no_isolation"`
	Network             runtime.NetworkConfig `json:"network"`
	ImageCache          string                `json:"image_cache"`
	RootToken           string                `json:"root_token"`
	BoxDiskMB           int                   `json:"box_disk_mb"`
	MemoryOvercommit    float64               `json:"memory_overcommit"`
	MaxSandboxes        int                   `json:"max_sandboxes"`
	NoDiskExport        bool                  `json:"no_disk_export"`
	LogLevel            slog.Level            `json:"log_level"`
}

// engineReply is the child's line once it serves, or why it could not.
type engineReply struct {
	Isolation string `json:"isolation,omitempty"`
	Sandboxed bool   `json:"sandboxed,omitempty"`
	Error     string `json:"error,omitempty"`
}

// startEngine starts the local engine on ln, or records the external sandboxd's address.
func (d *Dev) startEngine(ctx context.Context, ln net.Listener) error {
	if d.cfg.Sandbox.URL != "" {
		d.sandboxURL, d.sandboxToken = d.cfg.Sandbox.URL, d.cfg.Sandbox.Token
		return nil
	}
	dir := d.cfg.DataDir("engine")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	token, err := loadOrCreateSecret(filepath.Join(dir, "root-token"))
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	kind := d.cfg.EngineRuntime
	if kind == "auto" {
		kind = ""
	}
	nc := d.cfg.EngineNetwork
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	_ = ln.Close() // f holds the socket now
	cfg := engineChildConfig{Dir: dir, Runtime: kind, InsecureNoIsolation: d.cfg.EngineInsecureNoIsolation,
		Network:    runtime.NetworkConfig{Uplink: nc.Uplink, UplinkNetns: nc.UplinkNetns, Pool: nc.Pool, DNS: nc.DNS},
		ImageCache: d.cfg.ImageCache, RootToken: token, BoxDiskMB: d.cfg.EngineBoxDiskMB,
		MemoryOvercommit: d.cfg.EngineMemoryOvercommit, MaxSandboxes: d.cfg.EngineMaxSandboxes,
		NoDiskExport: d.cfg.EngineNoDiskExport, LogLevel: lowestLevel(d.log)}
	le := &localEngine{ln: f, url: "http://" + ln.Addr().String(), token: token}
	log := d.log.With("component", "engine")
	le.Spec = subproc.Spec{Name: "engine", Arg: engineChildArg, Config: cfg, Files: []*os.File{f}, Log: log,
		Stop: syscall.SIGTERM, Grace: suspendTimeout + 30*time.Second}
	le.Ready = func(r engineReply) error {
		if r.Error != "" {
			return fmt.Errorf("engine: %s", r.Error)
		}
		log.Info("engine ready", "url", le.url, "isolation", r.Isolation)
		return nil
	}
	if le.caps, err = le.Start(ctx); err != nil {
		_ = f.Close()
		return err
	}
	d.engine = le
	d.sandboxURL, d.sandboxToken = le.url, token
	d.watch("engine", le)
	return nil
}

// stop asks the engine to stop, which hibernates every box so nothing keeps running after
// `cocoonbox dev` exits (the next start wakes them on use), and waits for it.
func (le *localEngine) stop() error {
	defer le.ln.Close()
	return le.Stop()
}

// runEngineChild is the engine child: read the configuration, serve the sandboxd API on the
// socket it was handed, and on SIGTERM stop serving and hibernate every box. When its stdin
// closes (the dev stack died) it exits at once, as the stack's death would have ended an engine
// inside it: the boxes keep running and the next start adopts them.
func runEngineChild(in io.Reader, out, errOut io.Writer, files []*os.File) int {
	signal.Ignore(os.Interrupt) // the parent owns Ctrl-C and stops us in order
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	enc := json.NewEncoder(out)
	br := bufio.NewReader(in)
	var cfg engineChildConfig
	if err := json.NewDecoder(br).Decode(&cfg); err != nil {
		_ = enc.Encode(engineReply{Error: "read configuration: " + err.Error()})
		return 2
	}
	if len(files) != 1 {
		_ = enc.Encode(engineReply{Error: fmt.Sprintf("want the listening socket as fd 3, got %d files", len(files))})
		return 2
	}
	log := subproc.Logger(errOut, cfg.LogLevel)
	ln, err := net.FileListener(files[0])
	_ = files[0].Close()
	if err != nil {
		_ = enc.Encode(engineReply{Error: "listen: " + err.Error()})
		return 1
	}
	network, err := runtime.ParseNetwork(cfg.Network)
	if err != nil {
		_ = enc.Encode(engineReply{Error: err.Error()})
		return 1
	}
	rt, err := runtime.New(cfg.Runtime, runtime.Options{DataDir: filepath.Join(cfg.Dir, "runtime"), Logger: log,
		InsecureNoIsolation: cfg.InsecureNoIsolation, Network: network})
	if err != nil {
		_ = enc.Encode(engineReply{Error: err.Error()})
		return 1
	}
	eng, err := engine.New(engine.Options{
		Dir: cfg.Dir, Runtime: rt, Images: images.Resolver(cfg.ImageCache), RootToken: cfg.RootToken,
		Logger: log, OwnerAddr: ln.Addr().String(), BoxDiskMB: cfg.BoxDiskMB, NoDiskExport: cfg.NoDiskExport,
		MemoryOvercommit: cfg.MemoryOvercommit, MaxSandboxes: cfg.MaxSandboxes,
	})
	if err != nil {
		_ = enc.Encode(engineReply{Error: err.Error()})
		return 1
	}
	caps := rt.Capabilities()
	serveCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- eng.Serve(serveCtx, ln) }()
	_ = enc.Encode(engineReply{Isolation: caps.Isolation, Sandboxed: caps.Sandboxed})

	eof := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, br); close(eof) }()
	select {
	case <-eof:
		log.Warn("the dev stack is gone; the engine stops, leaving its boxes to the next start")
		return 1
	case err := <-served:
		log.Error("engine stopped serving", "error", err)
		return 1
	case <-term:
	}
	cancel()
	err = <-served
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	ctx, cancelSuspend := context.WithTimeout(context.Background(), suspendTimeout)
	defer cancelSuspend()
	err = errors.Join(err, eng.Suspend(ctx), eng.Close())
	if c, ok := rt.(io.Closer); ok { // runsc leaves a namespace mount under its state dir
		err = errors.Join(err, c.Close())
	}
	if err != nil {
		log.Error("engine stop", "error", err)
		return 1
	}
	return 0
}

// lowestLevel is the most verbose level log writes, for a child to log no more than is kept.
func lowestLevel(log *slog.Logger) slog.Level {
	for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn} {
		if log.Enabled(context.Background(), l) {
			return l
		}
	}
	return slog.LevelError
}

// poolSpecs are the engine's warm pools cfg asks for: each on the network lane of the boxes
// created without a network of their own (box_network), since a claim only takes a warm box of
// its own lane.
func poolSpecs(cfg config.Dev) []sandbox.PoolSpec {
	net := sandbox.NetNone
	if cfg.BoxNetwork != "" && cfg.BoxNetwork != cocoonbox.NetworkNone {
		net = sandbox.NetEgress
	}
	specs := []sandbox.PoolSpec{}
	for _, p := range cfg.Pools {
		s := sandbox.PoolSpec{Template: cmp.Or(p.Template, cfg.Template), Net: net, Size: cmp.Or(p.Size, sandbox.SizeSmall), Warm: p.Warm}
		specs = append(specs, s)
	}
	return specs
}

// applyPools sets the local engine's warm pools to the config's at every start; their boxes boot
// in the background. One the engine refuses (its image is not built) is logged: a create then
// boots cold, and says so.
func (d *Dev) applyPools(ctx context.Context) {
	if d.engine == nil {
		return // an external sandboxd's pools are its operator's
	}
	specs := poolSpecs(d.cfg)
	info, err := sandbox.NewHTTP(d.sandboxURL, d.sandboxToken, d.httpClient).SetPools(ctx, specs)
	if err != nil {
		d.log.Warn("warm pools not set; creates boot cold", "pools", specs, "err", err)
		return
	}
	for _, p := range info.Pools {
		d.log.Info("warm pool", "template", p.Key.Template, "size", p.Key.Size, "net", p.Key.Net, "target", p.Target)
	}
}

// EngineIsolation says what isolates the local engine's boxes (runtime.IsolationGVisor or
// runtime.IsolationNone), and whether it is a sandbox; "" for an external sandboxd.
func (d *Dev) EngineIsolation() (level string, sandboxed bool) {
	if d.engine == nil {
		return "", false
	}
	return d.engine.caps.Isolation, d.engine.caps.Sandboxed
}

// check reports the engine healthy when its HTTP API answers.
func (d *Dev) checkEngine(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(d.sandboxURL, "/")+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := d.httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("engine healthz: %s", resp.Status)
	}
	return nil
}

// loadOrCreateSecret reads a token kept in path, or makes one, so restarts keep credentials
// that clients may have stored.
func loadOrCreateSecret(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		if tok := strings.TrimSpace(string(data)); tok != "" {
			return tok, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(b[:])
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return tok, nil
}
