package subproc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/subproc"
)

const testArg = "__subproc-test-child"

// testConfig tells the test child what to do.
type testConfig struct {
	Do string `json:"do"` // "echo", "die", "grandchild", "waitterm"
}

type testReply struct {
	Said       string `json:"said"`
	Files      int    `json:"files"`
	Grandchild int    `json:"grandchild"`
}

func init() { subproc.Main(testArg, runTestChild) }

func runTestChild(in io.Reader, out, errOut io.Writer, files []*os.File) int {
	var cfg testConfig
	dec := json.NewDecoder(in)
	if err := dec.Decode(&cfg); err != nil {
		return 2
	}
	log := subproc.Logger(errOut, slog.LevelInfo)
	var grandchild int
	switch cfg.Do {
	case "die":
		log.Error("cannot start", "why", "told to")
		return 3
	case "grandchild": // a process that inherits stderr and outlives us
		cmd := exec.Command("sleep", "30")
		cmd.Stderr = errOut.(*os.File)
		if err := cmd.Start(); err != nil {
			return 4
		}
		grandchild = cmd.Process.Pid
	}
	log.Info("ready", "box", "b1")
	_ = json.NewEncoder(out).Encode(testReply{Said: cfg.Do, Files: len(files), Grandchild: grandchild})
	if cfg.Do == "grandchild" {
		return 0
	}
	// Stay until stdin closes.
	_, _ = io.Copy(io.Discard, dec.Buffered())
	_, _ = io.Copy(io.Discard, in)
	return 0
}

// logs is a handler that keeps what it is given, for the relay's assertions.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func start(t *testing.T, do string, files []*os.File, log *logs) (*subproc.Process, testReply, error) {
	t.Helper()
	var r testReply
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := subproc.Start(ctx, subproc.Spec{Name: "testchild", Arg: testArg, Config: testConfig{Do: do},
		Files: files, Log: slog.New(slog.NewTextHandler(log, nil)), Grace: 10 * time.Second}, &r)
	if err == nil {
		t.Cleanup(p.Kill)
	}
	return p, r, err
}

// TestStartAndStop: the child gets its configuration and files, answers, its log lines arrive
// with their level and attributes, and it stops when asked.
func TestStartAndStop(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	var log logs
	p, r, err := start(t, "echo", []*os.File{f}, &log)
	if err != nil {
		t.Fatal(err)
	}
	if r.Said != "echo" || r.Files != 1 {
		t.Errorf("reply %+v, want echo with 1 file", r)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	waitLog(t, &log, "level=INFO msg=ready box=b1")
}

// TestChildThatDiesBeforeReady is an error naming the child and how it exited, with its last
// words logged at their own level.
func TestChildThatDiesBeforeReady(t *testing.T) {
	var log logs
	_, _, err := start(t, "die", nil, &log)
	if err == nil || !strings.Contains(err.Error(), "testchild: child exited before it was ready (exit status 3)") {
		t.Fatalf("err = %v", err)
	}
	waitLog(t, &log, `level=ERROR msg="cannot start" why="told to"`)
}

// TestGrandchildDoesNotHoldDone: a child that exits is Done even while a process it started
// still holds its stderr, so a supervisor notices the death at once.
func TestGrandchildDoesNotHoldDone(t *testing.T) {
	var log logs
	p, r, err := start(t, "grandchild", nil, &log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(r.Grandchild, syscall.SIGKILL) })
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not done 10 s after the child exited")
	}
	if err := p.ExitError(); err == nil || err.Error() != "exited with status 0" {
		t.Errorf("exit = %v", err)
	}
}

// TestKilledChildIsDone: a SIGKILL is seen as the child's end, with how it ended.
func TestKilledChildIsDone(t *testing.T) {
	var log logs
	p, _, err := start(t, "echo", nil, &log)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not done 10 s after SIGKILL")
	}
	if err := p.ExitError(); err == nil || err.Error() != "signal: killed" {
		t.Errorf("exit = %v, want signal: killed", err)
	}
}

// waitLog waits for the relay to have logged want: it reads the child's stderr on its own.
func waitLog(t *testing.T, log *logs, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("relayed log %q, want %q", log.String(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
