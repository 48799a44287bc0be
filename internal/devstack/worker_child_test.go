package devstack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/worker"
)

// workerArg makes the test binary run a box worker (see TestMain), so a test can SIGKILL a real
// worker process in the middle of an activity and start another.
const workerArg = "__devstack-worker"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == workerArg {
		if err := runChildWorker(os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == engineNodeArg {
		if err := runEngineNode(os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, "engine node:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := runScanned(m)
	removeCLI()
	os.Exit(code)
}

// runChildWorker reads a config.Worker from in and runs the worker it describes, built from the
// same constructors as `cocoonbox serve worker`, until in closes (the test ended or died) or the
// process is killed.
func runChildWorker(in io.Reader) error {
	br := bufio.NewReader(in)
	dec := json.NewDecoder(br)
	var cfg config.Worker
	var hooks childHooks
	if err := dec.Decode(&cfg); err != nil {
		return err
	}
	if err := dec.Decode(&hooks); err != nil {
		return err
	}
	// Stdout carries only "ready"; the SDK's own logger would write there.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var icpt []interceptor.WorkerInterceptor
	if hooks.HoldDir != "" {
		icpt = append(icpt, &holdInterceptor{dir: hooks.HoldDir})
	}
	w, err := worker.Start(context.Background(), cfg, logger, icpt...)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, br)
	w.Stop()
	return nil
}

// childHooks are the fault points of a child worker, sent after its config.
type childHooks struct {
	// HoldDir, when set, is where the test arms a hold (see holdInterceptor) and finds which
	// activities started (startedFile).
	HoldDir string
}

// startedFile is the file a child worker with hooks writes in dir when an activity named name
// starts, local or not: a local activity, which the workflow runs inside its task, is in no
// list of pending activities that Temporal could show.
func startedFile(dir, name string) string { return filepath.Join(dir, "started-"+name) }

// holdFor is how long a held activity waits, done, before it returns.
const holdFor = 3 * time.Second

// holdInterceptor holds an activity whose work is done but whose result is not yet reported to
// Temporal, once the test arms it with a file arm-<activity type> in dir: the worker removes
// that file, writes held-<activity type> and waits holdFor before it returns. A part killed in
// that gap meets the point after the engine call: done by the engine, not recorded, so the
// activity may run again and must not do its work twice.
type holdInterceptor struct {
	interceptor.WorkerInterceptorBase
	dir string
}

func (h *holdInterceptor) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &holdActivity{dir: h.dir}
	a.Next = next
	return a
}

type holdActivity struct {
	interceptor.ActivityInboundInterceptorBase
	dir string
}

func (h *holdActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	name := activity.GetInfo(ctx).ActivityType.Name
	_ = os.WriteFile(startedFile(h.dir, name), nil, 0o644)
	res, err := h.Next.ExecuteActivity(ctx, in)
	if err == nil && os.Remove(filepath.Join(h.dir, "arm-"+name)) == nil {
		_ = os.WriteFile(filepath.Join(h.dir, "held-"+name), nil, 0o644)
		time.Sleep(holdFor)
	}
	return res, err
}

// workerConfig is the configuration of a worker serving d, which must run without its own.
func workerConfig(d *devstack.Dev) config.Worker {
	cfg := config.DefaultWorker(config.MapEnv(nil))
	cfg.Home = d.Home()
	cfg.Temporal = d.TemporalClient()
	cfg.Postgres.URL = devstack.DatabaseURL(d)
	cfg.Sandbox.URL, cfg.Sandbox.Token = d.Sandbox()
	cfg.S3 = d.S3()
	cfg.Template = "base"                                       // as testConfig's in-process worker
	cfg.Keyring = filepath.Join(d.Home(), "keys", "master.key") // the dev stack's own key
	cfg.HealthListen = "127.0.0.1:0"                            // tests run several workers at once
	return cfg
}

// childWorker is a worker running in a child process of the test.
type childWorker struct{ cmd *exec.Cmd }

// startChildWorker starts a worker process for cfg and returns once it polls; the test's cleanup
// kills it if the test has not.
func startChildWorker(t *testing.T, cfg config.Worker) *childWorker {
	t.Helper()
	return startChildWorkerWith(t, cfg, childHooks{})
}

// startChildWorkerWith is startChildWorker with fault points.
func startChildWorkerWith(t *testing.T, cfg config.Worker, hooks childHooks) *childWorker {
	t.Helper()
	cmd := exec.Command(os.Args[0], workerArg)
	cmd.Stderr = io.MultiWriter(os.Stderr, workerLog(t, cfg.Home))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &childWorker{cmd: cmd}
	t.Cleanup(c.kill)
	enc := json.NewEncoder(stdin)
	if err := enc.Encode(cfg); err != nil {
		t.Fatal(err)
	}
	if err := enc.Encode(hooks); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("worker did not start (said %q)", line)
	}
	return c
}

// kill SIGKILLs the worker: no graceful stop, its running activities are simply abandoned.
func (c *childWorker) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}
