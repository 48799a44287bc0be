package devstack

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/images"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// suspendTimeout bounds hibernating every box when the dev stack stops; an XFCE box
// checkpoints in well under a second, so this allows for many.
const suspendTimeout = 2 * time.Minute

// localEngine is the sandbox engine `cocoonbox dev` runs in-process when no external sandboxd
// is configured.
type localEngine struct {
	eng    *engine.Engine
	rt     runtime.Runtime
	url    string
	token  string
	cancel context.CancelFunc
	done   chan error
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
	log := d.log.With("component", "engine")
	nc := d.cfg.EngineNetwork
	network, err := runtime.ParseNetwork(runtime.NetworkConfig{Uplink: nc.Uplink, UplinkNetns: nc.UplinkNetns, Pool: nc.Pool, DNS: nc.DNS})
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	rt, err := runtime.New(kind, runtime.Options{DataDir: filepath.Join(dir, "runtime"), Logger: log,
		InsecureNoIsolation: d.cfg.EngineInsecureNoIsolation, Network: network})
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	eng, err := engine.New(engine.Options{
		Dir: dir, Runtime: rt, Images: images.Resolver(d.cfg.ImageCache), RootToken: token,
		Logger: log, OwnerAddr: ln.Addr().String(), BoxDiskMB: d.cfg.EngineBoxDiskMB,
		NoDiskExport: d.cfg.EngineNoDiskExport,
	})
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	le := &localEngine{eng: eng, rt: rt, url: "http://" + ln.Addr().String(), token: token, cancel: cancel, done: make(chan error, 1)}
	go func() { le.done <- eng.Serve(serveCtx, ln) }()
	d.engine = le
	d.sandboxURL, d.sandboxToken = le.url, token
	return nil
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

// stop stops serving, hibernates every box so nothing keeps running after `cocoonbox dev`
// exits (the next start wakes them on use), and closes the engine.
func (le *localEngine) stop() error {
	le.cancel()
	err := <-le.done
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), suspendTimeout)
	defer cancel()
	err = errors.Join(err, le.eng.Suspend(ctx), le.eng.Close())
	if c, ok := le.rt.(io.Closer); ok { // runsc leaves a namespace mount under its state dir
		err = errors.Join(err, c.Close())
	}
	return err
}

// EngineIsolation says what isolates the local engine's boxes (runtime.IsolationGVisor or
// runtime.IsolationNone), and whether it is a sandbox; "" for an external sandboxd.
func (d *Dev) EngineIsolation() (level string, sandboxed bool) {
	if d.engine == nil {
		return "", false
	}
	caps := d.engine.rt.Capabilities()
	return caps.Isolation, caps.Sandboxed
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
