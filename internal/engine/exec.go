package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

var (
	errTimedOut   = errors.New("exec timed out")
	errPreempted  = errors.New("sandbox hibernated or released during exec")
	errOutputOver = errors.New("exec output over the cap")
)

// handleExec runs one command in a sandbox and answers its exit code and whole output. A
// hibernated sandbox is woken first. The command is killed when it times out, when its output
// passes the cap, when the client goes away, and when the sandbox is hibernated or released.
func (e *Engine) handleExec(w http.ResponseWriter, r *http.Request) error {
	b, err := e.authorizeBox(r, false)
	if err != nil {
		return err
	}
	var req sandbox.ExecRequest
	if err := decode(w, r, &req, bodyStrict); err != nil {
		return err
	}
	env, err := checkExec(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	done, err := e.use(ctx, b, "exec", func() { cancel(errPreempted) })
	if err != nil {
		return err
	}
	defer done()
	if req.TimeoutSeconds > 0 {
		// No command outlives the longest lease, and the clamp keeps a huge value from
		// overflowing into an instant timeout.
		timeout := time.Duration(min(req.TimeoutSeconds, int(sandbox.MaxTTL/time.Second))) * time.Second
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, timeout, errTimedOut)
		defer stop()
	}

	// One cap over stdout and stderr together, as upstream: a buffered exec is for commands,
	// not for streaming files out of a box (that is the ports relay's job).
	out := &outputCap{left: sandbox.MaxExecOutput, stop: func() { cancel(errOutputOver) }}
	var stdout, stderr bytes.Buffer
	id := r.PathValue("id")
	// A command started while a checkpoint has the box paused fails: it waits for the thaw
	// instead, and one that a pause caught starting (no output yet) is started once more.
	var code int
	for try := 0; ; try++ {
		pauses, werr := b.thawed(ctx)
		if werr != nil {
			err = werr
			break
		}
		var stdin io.Reader // a fresh reader for each start
		if len(req.Stdin) > 0 {
			stdin = bytes.NewReader(req.Stdin)
		}
		code, err = e.rt.Exec(ctx, id, runtime.ExecRequest{
			Argv: req.Argv, Cwd: req.Cwd, Env: env, Stdin: stdin,
			Stdout: out.writer(&stdout), Stderr: out.writer(&stderr),
		})
		if err == nil || try > 0 || ctx.Err() != nil || stdout.Len()+stderr.Len() > 0 {
			break
		}
		if again, _ := b.thawed(ctx); again == pauses {
			break // no pause came: the failure is the command's
		}
	}
	cause := context.Cause(ctx)
	switch {
	case out.exceeded():
		e.metrics.count("execs", "too_large")
		return newError(kindTooLarge, "command output exceeds %d MiB", sandbox.MaxExecOutput>>20)
	case err == nil:
		e.metrics.count("execs", "ok")
		writeJSON(w, http.StatusOK, sandbox.ExecResult{ExitCode: code, Stdout: stdout.String(), Stderr: stderr.String()})
		return nil
	case errors.Is(cause, errTimedOut):
		e.metrics.count("execs", "timeout")
		return newError(kindTimeout, "command timed out after %d s and was killed", req.TimeoutSeconds)
	case errors.Is(cause, errPreempted):
		e.metrics.count("execs", "preempted")
		return newError(kindConflict, "the sandbox was hibernated or released while the command ran")
	case r.Context().Err() != nil:
		return nil // the client left; nobody reads an answer
	case errors.Is(err, runtime.ErrBadCommand):
		e.metrics.count("execs", "bad_command")
		return invalid("%v", err)
	}
	e.metrics.count("execs", "error")
	return e.runtimeError(r.Context(), b, "exec", err)
}

// checkExec validates an exec request and returns its environment as sorted KEY=value pairs.
func checkExec(req sandbox.ExecRequest) ([]string, error) {
	switch {
	case len(req.Argv) == 0:
		return nil, invalid("argv: must not be empty")
	case req.Argv[0] == "":
		return nil, invalid("argv: the program name is empty")
	case req.TimeoutSeconds < 0:
		return nil, invalid("timeout_seconds: must not be negative, got %d", req.TimeoutSeconds)
	case req.Cwd != "" && !path.IsAbs(req.Cwd):
		return nil, invalid("cwd: must be an absolute path, got %q", req.Cwd)
	case len(req.Stdin) > sandbox.MaxExecStdin:
		return nil, invalid("stdin: %d bytes, more than the %d a command's input may be", len(req.Stdin), sandbox.MaxExecStdin)
	}
	for _, a := range req.Argv {
		if strings.ContainsRune(a, 0) {
			return nil, invalid("argv: contains a NUL byte")
		}
	}
	env := make([]string, 0, len(req.Env))
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, invalid("env: bad variable name %q", k)
		}
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env, nil
}

// outputCap counts stdout and stderr against one limit; the write that would pass it fails and
// kills the command.
type outputCap struct {
	mu   sync.Mutex
	left int
	over bool
	stop func()
}

func (c *outputCap) exceeded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.over
}

func (c *outputCap) writer(buf *bytes.Buffer) *cappedWriter { return &cappedWriter{c: c, buf: buf} }

type cappedWriter struct {
	c   *outputCap
	buf *bytes.Buffer
}

func (w *cappedWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	if w.c.over || len(p) > w.c.left {
		if !w.c.over {
			w.c.over = true
			w.c.stop()
		}
		return 0, fmt.Errorf("write exec output: %w", errOutputOver)
	}
	w.c.left -= len(p)
	return w.buf.Write(p)
}
