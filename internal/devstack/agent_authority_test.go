package devstack_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/vault"
	"github.com/loomhand/cocoonbox/internal/worker"
	"github.com/loomhand/cocoonbox/workflows"
)

// tappedEngine is the engine client the worker dials boxes through, keeping every byte the
// worker sends to the agent's ports (gRPC and model links).
type tappedEngine struct {
	sandbox.Client
	mu   sync.Mutex
	sent map[int]*bytes.Buffer
}

func (e *tappedEngine) DialPort(ctx context.Context, ref sandbox.SandboxRef, port int) (sandbox.Conn, error) {
	c, err := e.Client.DialPort(ctx, ref, port)
	if err != nil {
		return nil, err
	}
	return &tappedConn{Conn: c, write: func(p []byte) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.sent[port] == nil {
			e.sent[port] = &bytes.Buffer{}
		}
		e.sent[port].Write(p)
	}}, nil
}

func (e *tappedEngine) sentTo(port int) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sent[port] == nil {
		return nil
	}
	return bytes.Clone(e.sent[port].Bytes())
}

type tappedConn struct {
	sandbox.Conn
	write func([]byte)
}

func (c *tappedConn) Write(p []byte) (int, error) {
	c.write(p)
	return c.Conn.Write(p)
}

// ReadFrom hides the relay connection's, which would bypass Write.
func (c *tappedConn) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(struct{ io.Writer }{c}, r)
}

// countingVault is the stack's vault, counting the secrets the worker opened.
type countingVault struct {
	*vault.Vault
	opened atomic.Int32
}

func (v *countingVault) Open(ctx context.Context, owner, name string) (string, error) {
	v.opened.Add(1)
	return v.Vault.Open(ctx, owner, name)
}

// TestAgentKeyAndAuthority runs the worker as `serve worker` builds it, with the engine client it
// dials boxes through tapped and its vault counted: a real run over the desktop box's agent works
// while not one byte sent to the box's agent ports carries the user's key; runs started straight
// in Temporal, bypassing the API, for another owner or with another gateway URL are refused
// before any secret is opened.
func TestAgentKeyAndAuthority(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	models := modeltest.NewServer(t, gatewayKey)
	cfg := agentConfig(t, models)
	cfg.NoWorker = true
	var (
		eng *tappedEngine
		vlt *countingVault
	)
	e := newDesktopEnvWith(t, cfg, 10*time.Minute, func(d *devstack.Dev) {
		wcfg := workerConfig(d)
		keys, err := secrets.LoadOrCreateKeyring(wcfg.KeyringPath())
		if err != nil {
			t.Fatal(err)
		}
		url, token := d.Sandbox()
		eng = &tappedEngine{Client: sandbox.NewHTTP(url, token, nil), sent: map[int]*bytes.Buffer{}}
		vlt = &countingVault{Vault: &vault.Vault{Store: d.Store, Keys: keys}}
		w := worker.New(worker.Options{
			Temporal: d.Temporal, Store: d.Store, Sandbox: eng, Keys: keys, Template: "desktop",
			Blobs: d.Blobs, Gateway: worker.StaticGateway(cfg.Agent), Vault: vlt,
		})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
	})
	a := newAgentEnv(t, cfg, models, e)

	t.Run("the key never enters the box", func(t *testing.T) {
		models.Script(
			modeltest.Calls(modeltest.Call("shell", `{"command":"echo keyless > /home/user/keyless.txt"}`)),
			modeltest.Reply("Done without a key."))
		run := a.start(t, "Write a file.")
		run = a.waitRun(t, run.GetId(), 3*time.Minute, string(cocoonbox.AgentRunSucceeded), string(cocoonbox.AgentRunFailed))
		if run.GetState() != string(cocoonbox.AgentRunSucceeded) || run.GetResult() != "Done without a key." {
			t.Fatalf("run %s: %q", run.GetState(), run.GetError())
		}
		last := models.Requests()[len(models.Requests())-1]
		if last.Header.Get("Authorization") != "Bearer "+gatewayKey {
			t.Fatalf("the gateway got %q", last.Header.Get("Authorization"))
		}
		for _, port := range []int{wire.AgentPort, wire.LinkPort} {
			sent := eng.sentTo(port)
			if len(sent) == 0 {
				t.Errorf("the tap saw nothing sent to port %d", port)
			}
			if bytes.Contains(sent, []byte(gatewayKey)) {
				t.Errorf("the model key was sent into the box on port %d", port)
			}
		}
	})

	// An attacker's gateway, which must never be dialed.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var dialed atomic.Int32
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			dialed.Add(1)
			c.Close()
		}
	}()
	mallory, err := a.d.Store.CreateUser(a.ctx, store.NewUser{Name: "mallory"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.d.Store.CreateAgentRun(a.ctx, store.NewAgentRun{ID: "run_owners", BoxID: a.id, Owner: a.owner.ID,
		Task: "t", Provider: "openai", Model: "scripted-1"}); err != nil {
		t.Fatal(err)
	}
	opened := vlt.opened.Load()
	for _, tc := range []struct {
		name, run, owner, want string
	}{
		{"another gateway URL", "run_forged", a.owner.ID, "no such run was started through the API"},
		{"another owner", "run_owners", mallory.ID, "started by " + a.owner.ID + ", not " + mallory.ID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The input of an older client: it still names a gateway and a secret.
			in := map[string]any{"RunID": tc.run, "BoxID": a.id, "Owner": tc.owner, "Task": "leak the key",
				"Model": "scripted-1", "Provider": "openai", "BaseURL": "http://" + lis.Addr().String() + "/v1",
				"KeySecret": gatewaySecret, "MaxSteps": 1}
			wf, err := a.d.Temporal.ExecuteWorkflow(a.ctx, client.StartWorkflowOptions{
				ID: workflows.AgentRunWorkflowID(tc.run) + "-direct", TaskQueue: workflows.TaskQueue,
			}, "AgentRunWorkflow", in) // by name, as a client of another language would: no type check
			if err != nil {
				t.Fatal(err)
			}
			err = wf.Get(a.ctx, nil)
			var app *temporal.ApplicationError
			if !errors.As(err, &app) || !strings.Contains(app.Message(), tc.want) {
				t.Fatalf("direct run: %v; want it refused naming %q", err, tc.want)
			}
		})
	}
	if n := vlt.opened.Load() - opened; n != 0 {
		t.Errorf("runs started straight in Temporal opened %d secrets", n)
	}
	if n := dialed.Load(); n != 0 {
		t.Errorf("the attacker's gateway was dialed %d times", n)
	}
	if n := len(models.Requests()); n != 2 {
		t.Errorf("the gateway saw %d requests, want the real run's 2", n)
	}
}
