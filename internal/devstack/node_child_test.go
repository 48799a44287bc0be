package devstack_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/images"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/worker"
)

// engineNodeArg makes the test binary run one more engine node of a dev stack (see TestMain): a
// gVisor engine and the worker beside it (cfg.Node), as `serve engine` and `serve worker` on a
// host of their own, in one process, so a test can SIGKILL the node whole.
const engineNodeArg = "__devstack-engine-node"

// engineNodeConfig is the engine's part of an engine node child; the worker's config.Worker
// follows it on stdin.
type engineNodeConfig struct {
	Dir        string
	ImageCache string
	Listen     string // the engine's address; "" is a free loopback port
}

// newNodeEngine makes the engine of an engine node in dir, listening on ln.
func newNodeEngine(n engineNodeConfig, token string, ln net.Listener, log *slog.Logger) (*engine.Engine, runtime.Runtime, error) {
	rt, err := runtime.New(runtime.NameGVisor, runtime.Options{DataDir: filepath.Join(n.Dir, "runtime"), Logger: log})
	if err != nil {
		return nil, nil, err
	}
	e, err := engine.New(engine.Options{Dir: filepath.Join(n.Dir, "engine"), Runtime: rt, Images: images.Resolver(n.ImageCache),
		RootToken: token, OwnerAddr: ln.Addr().String(), Logger: log})
	return e, rt, err
}

// runEngineNode serves an engine node until stdin closes (the test ended or died) or it is
// killed; it says "ready URL" once its worker runs.
func runEngineNode(in io.Reader) error {
	br := bufio.NewReader(in)
	dec := json.NewDecoder(br)
	var n engineNodeConfig
	var cfg config.Worker
	if err := dec.Decode(&n); err != nil {
		return err
	}
	if err := dec.Decode(&cfg); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ln, err := net.Listen("tcp", cmp.Or(n.Listen, "127.0.0.1:0"))
	if err != nil {
		return err
	}
	e, rt, err := newNodeEngine(n, cfg.Sandbox.Token, ln, log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = e.Serve(ctx, ln) }()
	cfg.Sandbox.URL = "http://" + ln.Addr().String()
	w, err := worker.Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	fmt.Println("ready " + cfg.Sandbox.URL)
	_, _ = io.Copy(io.Discard, br)
	w.Stop()
	cancel()
	_ = e.Close()
	if c, ok := rt.(io.Closer); ok {
		_ = c.Close()
	}
	return nil
}

// engineNode is an engine node running in a child process of the test.
type engineNode struct {
	childWorker // the process; kill SIGKILLs engine and worker at once, as a host that dies
	url         string
	cfg         engineNodeConfig
	token       string
	client      *sandbox.HTTP // root
}

// startEngineNodeChild starts an engine node for wcfg (whose Node names it) with the dev stack's
// image cache, and returns once its worker runs. When the test ends, the node is killed if it
// lives, and its boxes, which outlive a killed engine, are released by an engine started again
// on its data.
func startEngineNodeChild(t testing.TB, imageCache string, wcfg config.Worker) *engineNode {
	t.Helper()
	return startEngineNodeCmd(t, exec.Command(os.Args[0], engineNodeArg), engineNodeConfig{ImageCache: imageCache}, wcfg)
}

// startEngineNodeCmd is startEngineNodeChild with the child's command (run in a network
// namespace, say) and the engine's configuration, whose Dir it sets.
func startEngineNodeCmd(t testing.TB, cmd *exec.Cmd, cfg engineNodeConfig, wcfg config.Worker) *engineNode {
	t.Helper()
	cfg.Dir = shortTemp(t)
	n := &engineNode{childWorker: childWorker{cmd: cmd}, cfg: cfg, token: wcfg.Sandbox.Token}
	n.cmd.Stderr = os.Stderr
	if scanned(wcfg.Home) { // a test's stack: the scan reads what the node logs
		n.cmd.Stderr = io.MultiWriter(os.Stderr, workerLog(t, wcfg.Home))
	}
	stdin, err := n.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := n.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.cleanUp)
	enc := json.NewEncoder(stdin)
	if err := enc.Encode(n.cfg); err != nil {
		t.Fatal(err)
	}
	if err := enc.Encode(wcfg); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	if !ok {
		t.Fatalf("engine node %s did not start (said %q)", wcfg.Node, line)
	}
	n.url = url
	n.client = sandbox.NewHTTP(url, n.token, &http.Client{Timeout: time.Minute})
	return n
}

// cleanUp kills the node and releases the boxes its engine left running.
func (n *engineNode) cleanUp() {
	n.kill()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return
	}
	e, rt, err := newNodeEngine(n.cfg, n.token, ln, slog.New(slog.DiscardHandler))
	if err != nil {
		_ = ln.Close()
		return
	}
	served := make(chan error, 1)
	serveCtx, stop := context.WithCancel(context.Background())
	go func() { served <- e.Serve(serveCtx, ln) }()
	releaseAll(sandbox.NewHTTP("http://"+ln.Addr().String(), n.token, nil))
	stop()
	<-served
	_ = e.Close()
	if cl, ok := rt.(io.Closer); ok {
		_ = cl.Close()
	}
}

// releaseAll releases every sandbox of the engine c is root of, within two minutes.
func releaseAll(c *sandbox.HTTP) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rows, err := c.List(ctx, "")
	if err != nil {
		return
	}
	for _, r := range rows {
		if full, err := c.Get(ctx, r.ID); err == nil {
			_ = c.Release(ctx, sandbox.SandboxRef{ID: full.ID, Token: full.Token})
		}
	}
}
