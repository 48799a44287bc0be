package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Shell limits.
const (
	ShellDefaultTimeout = 60 * time.Second
	ShellMaxTimeout     = 600 * time.Second
	ShellMaxOutput      = 64 << 10 // bytes kept of stdout and of stderr, each
)

// Shell is the `shell` tool: it runs a command with sh -c as the agent's user.
type Shell struct {
	// Dir is the working directory when the call gives no cwd; empty means the agent's.
	Dir string
}

// Name is "shell".
func (Shell) Name() string { return "shell" }

// Description tells the model what the tool does.
func (Shell) Description() string {
	return "Run a shell command (sh -c) in the box and return its exit code, stdout and stderr " +
		"(each cut at 64 KiB). Use it to inspect and change files, run programs and install packages."
}

// Schema is the JSON schema of the arguments.
func (Shell) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{` +
		`"command":{"type":"string","description":"the command, run with sh -c"},` +
		`"timeout_seconds":{"type":"integer","minimum":1,"maximum":600,"description":"kill the command after this long (default 60)"},` +
		`"cwd":{"type":"string","description":"working directory"}},` +
		`"required":["command"],"additionalProperties":false}`)
}

type shellArgs struct {
	Command        string `json:"command"`
	TimeoutSeconds *int   `json:"timeout_seconds"`
	Cwd            string `json:"cwd"`
}

// Call runs the command. A non-zero exit or a timeout is a Result with IsError set.
func (s Shell) Call(ctx context.Context, raw json.RawMessage) (Result, error) {
	var a shellArgs
	if err := DecodeArgs(raw, &a); err != nil {
		return Result{}, err
	}
	if strings.TrimSpace(a.Command) == "" {
		return Result{}, fmt.Errorf("%w: command is required", ErrInvalid)
	}
	timeout := ShellDefaultTimeout
	if a.TimeoutSeconds != nil {
		n := *a.TimeoutSeconds
		if n < 1 || n > int(ShellMaxTimeout/time.Second) {
			return Result{}, fmt.Errorf("%w: timeout_seconds must be between 1 and 600, not %d", ErrInvalid, n)
		}
		timeout = time.Duration(n) * time.Second
	}
	dir := a.Cwd
	if dir == "" {
		dir = s.Dir
	} else if s.Dir != "" {
		dir = resolve(s.Dir, dir)
	}

	parent := ctx
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	cmd := ShellCommand(ctx, a.Command, dir, nil)
	stdout, stderr := &capWriter{max: ShellMaxOutput}, &capWriter{max: ShellMaxOutput}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()

	var b strings.Builder
	isErr := false
	var exitErr *exec.ExitError
	if parent.Err() != nil {
		return Result{}, parent.Err() // the call was cancelled, not the command's fault
	}
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(&b, "timed out after %s; killed\n", timeout)
		isErr = true
	case err == nil:
		b.WriteString("exit code: 0\n")
	case errors.As(err, &exitErr):
		fmt.Fprintf(&b, "exit code: %d\n", exitErr.ExitCode())
		isErr = true
	default:
		fmt.Fprintf(&b, "could not run: %v\n", err)
		isErr = true
	}
	stdout.writeTo(&b, "stdout")
	stderr.writeTo(&b, "stderr")
	return Result{Text: b.String(), IsError: isErr}, nil
}

// ShellCommand returns a command running command with sh -c in dir (empty: the agent's) with env
// added to the agent's environment. When ctx is done the command's whole process group is
// killed, and Wait returns soon after even if a leftover holds its output open.
func ShellCommand(ctx context.Context, command, dir string, env []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Dir = dir
	if len(env) > 0 {
		cmd.Env = append(cmd.Environ(), env...)
	}
	setProcessGroup(cmd)
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// capWriter keeps the first max bytes written and counts the rest.
type capWriter struct {
	max     int
	buf     bytes.Buffer
	dropped int64
}

func (w *capWriter) Write(p []byte) (int, error) {
	if room := w.max - w.buf.Len(); room > 0 {
		if len(p) <= room {
			w.buf.Write(p)
			return len(p), nil
		}
		w.buf.Write(p[:room])
		w.dropped += int64(len(p) - room)
		return len(p), nil
	}
	w.dropped += int64(len(p))
	return len(p), nil
}

func (w *capWriter) writeTo(b *strings.Builder, name string) {
	if w.buf.Len() == 0 && w.dropped == 0 {
		return
	}
	fmt.Fprintf(b, "--- %s ---\n", name)
	b.WriteString(strings.ToValidUTF8(w.buf.String(), "\uFFFD"))
	if w.dropped > 0 {
		fmt.Fprintf(b, "\n[%s truncated: %d more bytes not shown]", name, w.dropped)
	}
	if !strings.HasSuffix(b.String(), "\n") {
		b.WriteByte('\n')
	}
}

// DecodeArgs decodes a call's JSON arguments strictly, so a misspelt field is a validation error
// the model sees; empty or null arguments decode as {}.
func DecodeArgs(raw json.RawMessage, v any) error {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		raw = json.RawMessage(`{}`)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fmt.Errorf("%w: %s must be a %s", ErrInvalid, te.Field, te.Type)
		}
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}
