package devstack_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// TestChaosAPI kills the API under a CLI command, as a crash or the OOM killer would kill
// `cocoonbox serve api` while a service manager starts it again: the real CLI runs `box
// snapshot` and `box create` against an API process of its own, which is SIGKILLed once the
// operation's activity has started and started again on the same address. The CLI sends the
// call again with its request ID until the API answers, and the API makes that the operation it
// had started: one snapshot, one box, and the command succeeds.
func TestChaosAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.NoWorker = true // a worker of its own, whose hooks say when an activity starts
	d, ctx, owner, eng := newBoxEnv(t, cfg, 10*time.Minute)
	hooks := childHooks{HoldDir: t.TempDir()}
	startChildWorkerWith(t, workerConfig(d), hooks)
	bin := buildCLI(t)
	api := startChildAPI(t, bin, d)
	cliCfg, err := config.LoadCLI(d.Bootstrap().CLIConfig, config.MapEnv(nil))
	if err != nil || cliCfg.Token == "" {
		t.Fatalf("cli config: %+v, %v", cliCfg, err)
	}
	id := cocoonbox.NewBoxID()
	if _, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: id, Name: "chaos-api", Size: cocoonbox.SizeSmall}); err != nil {
		t.Fatal(err)
	}
	// run starts the CLI against the API process, kills and restarts that process once
	// activity has started, and returns what the CLI printed once it exits.
	run := func(t *testing.T, activity string, args ...string) string {
		t.Helper()
		started := startedFile(hooks.HoldDir, activity)
		_ = os.Remove(started) // an earlier command's
		cmd := exec.CommandContext(ctx, bin, append(args, "--endpoint", api.url(), "--token", cliCfg.Token)...)
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// Polled without backoff: a wake's or a hibernate's activity lasts a fraction of a
		// second, and the kill must land inside it.
		for !exists(started) {
			select {
			case err := <-done:
				t.Fatalf("the CLI ended before %s started: %v\n%s%s", activity, err, stdout.String(), stderr.String())
			case <-ctx.Done():
				t.Fatalf("%s never started", activity)
			case <-time.After(5 * time.Millisecond):
			}
		}
		api.kill(t)
		api.start(t)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("cocoonbox %s with the API killed: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
			}
		case <-ctx.Done():
			t.Fatal("the CLI did not end after the API came back")
		}
		return stdout.String()
	}

	sandboxes := func(t *testing.T) int {
		t.Helper()
		rows, err := eng.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		return len(rows)
	}
	state := func(t *testing.T, box cocoonbox.BoxID, want cocoonbox.BoxState) {
		t.Helper()
		v, err := d.Boxes.Get(ctx, owner.ID, box)
		if err != nil || v.State != want {
			t.Fatalf("box %s: %+v, %v; want %s", box, v.State, err, want)
		}
	}
	spare := cocoonbox.NewBoxID()
	cells := []struct {
		command, activity string
		run               func(t *testing.T)
	}{
		{"box snapshot", "UploadSnapshot", func(t *testing.T) {
			out := run(t, "UploadSnapshot", "box", "snapshot", "chaos-api")
			snaps, err := d.Store.ListSnapshots(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if len(snaps) != 1 || snaps[0].State != cocoonbox.SnapshotComplete || !strings.Contains(out, string(snaps[0].ID)) {
				t.Fatalf("snapshots %+v after one box snapshot that printed %q; want exactly that one, complete", snaps, out)
			}
		}},
		{"box create", "Claim", func(t *testing.T) {
			before := sandboxes(t)
			run(t, "Claim", "box", "create", "chaos-spare", "--request-id", string(spare))
			views, err := d.Boxes.List(ctx, owner.ID)
			if err != nil {
				t.Fatal(err)
			}
			named := 0
			for _, v := range views {
				if v.Name == "chaos-spare" {
					named++
				}
			}
			state(t, spare, cocoonbox.BoxStateRunning)
			if after := sandboxes(t); named != 1 || after != before+1 {
				t.Errorf("%d boxes named chaos-spare and %d → %d sandboxes; want one new box with one sandbox", named, before, after)
			}
		}},
		{"box restore", "RestoreSnapshot", func(t *testing.T) {
			before := sandboxes(t)
			run(t, "RestoreSnapshot", "box", "restore", "chaos-api")
			state(t, id, cocoonbox.BoxStateRunning)
			// The restore answers before the replaced sandbox's release ends.
			testutil.EventuallyReports(t, testutil.WaitShort, fmt.Sprintf("%d sandboxes again: a restore replaces the box's sandbox", before), func() (bool, string) {
				after := sandboxes(t)
				return after == before, fmt.Sprintf("%d sandboxes", after)
			})
		}},
		{"box hibernate", "HibernateRecorded", func(t *testing.T) {
			run(t, "HibernateRecorded", "box", "hibernate", "chaos-spare")
			state(t, spare, cocoonbox.BoxStateHibernated)
		}},
		{"box wake", "Wake", func(t *testing.T) {
			run(t, "Wake", "box", "wake", "chaos-spare")
			state(t, spare, cocoonbox.BoxStateRunning)
		}},
		{"box rm", "Release", func(t *testing.T) {
			before := sandboxes(t)
			run(t, "Release", "box", "rm", "--yes", "chaos-spare")
			if v, err := d.Boxes.Get(ctx, owner.ID, spare); err == nil && v.State != cocoonbox.BoxStateDeleted {
				t.Fatalf("removed box: %+v", v.State)
			}
			if after := sandboxes(t); after != before-1 {
				t.Errorf("%d → %d sandboxes; want the removed box's released", before, after)
			}
			// Sent again once it is done, a delete with a request ID is answered as done; a
			// plain second delete learns that the box is gone.
			if v, err := d.Boxes.Delete(boxsvc.WithRequestID(ctx, "cli-late"), owner.ID, spare); err != nil || v.State != cocoonbox.BoxStateDeleted {
				t.Errorf("a resent delete of a deleted box: %+v, %v; want it deleted", v.State, err)
			}
			if _, err := d.Boxes.Delete(ctx, owner.ID, spare); cocoonbox.ErrorCode(err) != cocoonbox.ENotFound {
				t.Errorf("a plain delete of a deleted box: %v; want not found", err)
			}
		}},
	}
	for _, c := range cells {
		verdict := "held"
		if !t.Run(strings.ReplaceAll(c.command, " ", "_"), c.run) {
			verdict = "FAILED"
		}
		chaosRows = append(chaosRows, fmt.Sprintf("| %s (the CLI) | api | %s started | %s |", c.command, c.activity, verdict))
	}
	writeChaosReport(t)
}

// childRole is a `cocoonbox serve` role (api or worker) run from the built CLI against a dev
// stack's parts, with a config file of its own that it keeps across restarts.
type childRole struct {
	bin, role, config string
	cmd               *exec.Cmd
	log               *os.File
	ready             chan error // the current process printed its ready line, or exited first
}

// childAPI is `cocoonbox serve api` on an address of its own.
type childAPI struct {
	*childRole
	addr string
}

// apiConfig is the configuration of a `serve api` for d on a free loopback address.
func apiConfig(t *testing.T, d *devstack.Dev) config.API {
	t.Helper()
	cfg := config.DefaultAPI(config.MapEnv(nil))
	cfg.Home = d.Home()
	cfg.Listen = freeLoopbackAddr(t)
	cfg.Temporal = d.TemporalClient()
	cfg.Postgres.URL = devstack.DatabaseURL(d)
	cfg.Sandbox.URL, cfg.Sandbox.Token = d.Sandbox()
	cfg.Keyring = filepath.Join(d.Home(), "keys", "master.key")
	return cfg
}

func startChildAPI(t *testing.T, bin string, d *devstack.Dev) *childAPI {
	t.Helper()
	cfg := apiConfig(t, d)
	a := &childAPI{childRole: newChildRole(t, bin, "api", cfg), addr: cfg.Listen}
	a.start(t)
	return a
}

// newChildRole writes cfg for role and returns the role, not yet started; the test's cleanup
// kills it and, when the test failed, logs what it wrote.
func newChildRole(t *testing.T, bin, role string, cfg any) *childRole {
	t.Helper()
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &childRole{bin: bin, role: role, config: filepath.Join(dir, role+".yaml")}
	if err := os.WriteFile(r.config, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if r.log, err = os.Create(filepath.Join(dir, role+".log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.cmd != nil && r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			_ = r.cmd.Wait()
		}
		if t.Failed() {
			_, _ = r.log.Seek(0, io.SeekStart)
			out, _ := io.ReadAll(io.LimitReader(r.log, 64<<10))
			t.Logf("serve %s's log:\n%s", role, out)
		}
		_ = r.log.Close()
	})
	return r
}

func (a *childAPI) url() string { return "http://" + a.addr }

// readyLine is what each role prints once it serves.
var readyLine = map[string]string{"api": "serving on", "worker": "polling task queue"}

// launch runs the role's process without waiting for it to serve; ready reports when it does.
func (r *childRole) launch(t *testing.T) {
	t.Helper()
	cmd := exec.Command(r.bin, "--config", r.config, "serve", r.role)
	cmd.Env = []string{"HOME=" + filepath.Dir(r.config), "PATH=" + os.Getenv("PATH")}
	cmd.Stderr = r.log
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.cmd = cmd
	ready := make(chan error, 1)
	r.ready = ready
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), readyLine[r.role]) {
				ready <- nil
				_, _ = io.Copy(io.Discard, out)
				return
			}
		}
		ready <- fmt.Errorf("serve %s exited before it served: %v", r.role, sc.Err())
	}()
}

// start runs the role's process and returns once it serves.
func (r *childRole) start(t *testing.T) {
	t.Helper()
	r.launch(t)
	select {
	case err := <-r.ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testutil.WaitLong):
		t.Fatalf("serve %s did not serve in time", r.role)
	}
}

// kill SIGKILLs the role's process and reaps it.
func (r *childRole) kill(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = r.cmd.Wait()
}
