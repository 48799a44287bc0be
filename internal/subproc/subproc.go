// Package subproc runs a part of this program as a child process of it: the executable started
// again with a marker argument, configured over stdin, answering one JSON line on stdout once it
// is ready, logging on stderr. One binary serves every part, and a part that dies (a crash, the
// OOM killer, a chaos test's SIGKILL) takes only itself down, for a supervisor to start again.
//
// The configuration travels over stdin, never argv or the environment, which other local users
// can read in /proc. A child whose stdin closes was stopped or lost its parent.
package subproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Main runs run in place of the program when it was started as the child marked arg, and exits
// with its status; otherwise it returns at once. Call it from an init function, so the child
// does nothing of the parent's main.
func Main(arg string, run func(stdin io.Reader, stdout, stderr io.Writer, files []*os.File) int) {
	if len(os.Args) < 3 || os.Args[1] != arg {
		return
	}
	n, err := strconv.Atoi(os.Args[2])
	if err != nil || n < 0 {
		fmt.Fprintf(os.Stderr, "%s: bad file count %q\n", arg, os.Args[2])
		os.Exit(2)
	}
	files := make([]*os.File, n)
	for i := range files {
		files[i] = os.NewFile(uintptr(3+i), fmt.Sprintf("fd%d", 3+i))
	}
	os.Exit(run(os.Stdin, os.Stdout, os.Stderr, files))
}

// Spec is a child to start.
type Spec struct {
	Name   string        // what the child is, in errors and log lines ("engine")
	Arg    string        // the marker Main looks for
	Config any           // sent as one JSON value on stdin
	Files  []*os.File    // passed as fd 3, 4, …
	Log    *slog.Logger  // where the child's stderr goes
	Stop   os.Signal     // asks the child to stop gracefully; nil closes its stdin instead
	Grace  time.Duration // how long a graceful stop may take before the child is killed
}

// Process is one run of a child.
type Process struct {
	spec    Spec
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	done    chan struct{}
	waitErr error // set before done is closed
}

// Start starts the child and waits for its first line on stdout, decoded into reply. ctx bounds
// the start only. The child is in a process group of its own, so a Ctrl-C at the terminal
// reaches only the parent, which stops its children in order.
func Start(ctx context.Context, spec Spec, reply any) (*Process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%s: find executable: %w", spec.Name, err)
	}
	if spec.Log == nil {
		spec.Log = slog.New(slog.DiscardHandler)
	}
	cmd := exec.Command(exe, spec.Arg, strconv.Itoa(len(spec.Files)))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.ExtraFiles = spec.Files
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.Name, err)
	}
	// Pipes of our own, not StdoutPipe and StderrPipe: Wait does not wait on them, so a reply
	// written just before the child exits is still read, and a grandchild that inherited
	// stderr cannot hold Done back.
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spec.Name, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("%s: %w", spec.Name, err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("%s: start child: %w", spec.Name, err)
	}
	p := &Process{spec: spec, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() { relayLog(errR, spec.Log); errR.Close() }()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := json.NewEncoder(stdin).Encode(spec.Config); err != nil {
		p.Kill()
		return nil, fmt.Errorf("%s: configure child: %w", spec.Name, err)
	}
	replied := make(chan error, 1)
	go func() {
		replied <- json.NewDecoder(outR).Decode(reply)
		_, _ = io.Copy(io.Discard, outR) // a write to a closed stdout would kill the child
		outR.Close()
	}()
	select {
	case err := <-replied:
		if err != nil {
			p.Kill()
			return nil, fmt.Errorf("%s: child exited before it was ready (%v)", spec.Name, p.ExitError())
		}
		return p, nil
	case <-ctx.Done():
		p.Kill()
		return nil, fmt.Errorf("%s: start child: %w", spec.Name, ctx.Err())
	}
}

// Done is closed when the process has exited, stopped or on its own.
func (p *Process) Done() <-chan struct{} { return p.done }

// ExitError says how the process ended, once Done is closed; nil before.
func (p *Process) ExitError() error {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return errors.New("exited with status 0")
		}
		return p.waitErr
	default:
		return nil
	}
}

// Pid is the process's pid, for a test that kills it.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop asks the child to stop (its stop signal, or its stdin closed), waits up to its grace
// period and then kills it. It returns nil when the child exited with status 0.
func (p *Process) Stop() error {
	if p.spec.Stop != nil {
		_ = p.cmd.Process.Signal(p.spec.Stop)
	} else {
		_ = p.stdin.Close()
	}
	select {
	case <-p.done:
	case <-time.After(p.spec.Grace):
		p.Kill()
		return fmt.Errorf("%s: stop: the child did not exit within %s and was killed", p.spec.Name, p.spec.Grace)
	}
	_ = p.stdin.Close()
	if p.waitErr != nil {
		return fmt.Errorf("%s: stop: %w", p.spec.Name, p.waitErr)
	}
	return nil
}

// CloseStdin closes the child's stdin, as the kernel does when the parent dies.
func (p *Process) CloseStdin() { _ = p.stdin.Close() }

// Kill ends the child at once and waits for it.
func (p *Process) Kill() {
	_ = p.stdin.Close()
	_ = p.cmd.Process.Kill()
	<-p.done
}

// relayLog passes the child's stderr to log: a line the child's JSON logger wrote keeps its level,
// message and attributes; any other line (a panic, a runtime's output) is a warning.
func relayLog(r io.Reader, log *slog.Logger) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			log.Warn("child output", "output", line)
			continue
		}
		var level slog.Level
		if s, ok := rec[slog.LevelKey].(string); !ok || level.UnmarshalText([]byte(s)) != nil {
			level = slog.LevelWarn
		}
		msg, _ := rec[slog.MessageKey].(string)
		delete(rec, slog.TimeKey)
		delete(rec, slog.LevelKey)
		delete(rec, slog.MessageKey)
		args := make([]any, 0, 2*len(rec))
		for _, k := range slices.Sorted(maps.Keys(rec)) {
			args = append(args, k, rec[k])
		}
		log.Log(context.Background(), level, msg, args...)
	}
	_, _ = io.Copy(io.Discard, r)
}

// Logger is the child's logger: JSON on stderr, which the parent's relay re-logs.
func Logger(stderr io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
}

// Child is a child that is started again in place after it dies, each run a Process; R is its
// ready line. Ready, when set, checks a run's line: an error kills that run and is Start's.
type Child[R any] struct {
	Spec  Spec
	Ready func(R) error
	proc  atomic.Pointer[Process]
}

// Start starts a run and returns its ready line.
func (c *Child[R]) Start(ctx context.Context) (R, error) {
	var r R
	p, err := Start(ctx, c.Spec, &r)
	if err != nil {
		return r, err
	}
	if c.Ready != nil {
		if err := c.Ready(r); err != nil {
			p.Kill()
			return r, err
		}
	}
	c.proc.Store(p)
	return r, nil
}

// Restart starts a run again after the last one exited (a crash, the OOM killer).
func (c *Child[R]) Restart(ctx context.Context) error {
	select {
	case <-c.Done():
	default:
		return fmt.Errorf("%s: restart: it is still running", c.Spec.Name)
	}
	_, err := c.Start(ctx)
	return err
}

// Process is the run started last; nil before the first.
func (c *Child[R]) Process() *Process { return c.proc.Load() }

// Done is closed when the run started last has exited.
func (c *Child[R]) Done() <-chan struct{} { return c.proc.Load().Done() }

// ExitError says how the run started last ended, once Done is closed.
func (c *Child[R]) ExitError() error { return c.proc.Load().ExitError() }

// Stop stops the run started last, unless it has already exited.
func (c *Child[R]) Stop() error {
	p := c.proc.Load()
	select {
	case <-p.Done():
		return nil // it died, and nothing is bringing it back
	default:
	}
	return p.Stop()
}
