package boxsvc

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// Limits of the data-plane calls.
const (
	// MaxFileBytes bounds ReadFile and WriteFile.
	MaxFileBytes = 8 << 20
	// MaxExecTimeout bounds Exec's timeout.
	MaxExecTimeout = 3600
	// DefaultExecTimeout is Exec's timeout when none is given.
	DefaultExecTimeout = 60
)

// ExecRequest is a command to run in a box.
type ExecRequest struct {
	Argv           []string
	Cwd            string
	Env            map[string]string
	TimeoutSeconds int
	Stdin          []byte // the command's standard input, at most sandbox.MaxExecStdin bytes
}

// ExecResult is a finished command; a non-zero exit is a result, not an error.
type ExecResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

// Conn is a byte pipe into a box (the desktop's RFB stream) whose write side closes alone: the
// engine relay's connection, as the API sees it.
type Conn interface {
	net.Conn
	CloseWrite() error
}

var _ Conn = sandbox.Conn(nil)

// Exec runs a command to completion in the box (driver). A hibernated box is woken through its
// workflow first, so the workflow never believes asleep a box the engine woke behind it. A
// user's execs and file transfers in flight in this process are bounded by Quota.Execs.
func (s *Service) Exec(ctx context.Context, caller string, id cocoonbox.BoxID, req ExecRequest) (ExecResult, error) {
	switch {
	case len(req.Argv) == 0 || req.Argv[0] == "":
		return ExecResult{}, cocoonbox.Invalid("argv", "is required: the command and its arguments")
	case req.TimeoutSeconds < 0 || req.TimeoutSeconds > MaxExecTimeout:
		return ExecResult{}, cocoonbox.Invalid("timeout_seconds", fmt.Sprintf("must be 0 to %d, got %d", MaxExecTimeout, req.TimeoutSeconds))
	case req.Cwd != "" && !path.IsAbs(req.Cwd):
		return ExecResult{}, cocoonbox.Invalid("cwd", fmt.Sprintf("must be an absolute path, got %q", req.Cwd))
	case len(req.Stdin) > sandbox.MaxExecStdin:
		return ExecResult{}, cocoonbox.Invalid("stdin", fmt.Sprintf("is %d bytes, more than the %d a command's input may be; copy a file in with box cp",
			len(req.Stdin), sandbox.MaxExecStdin))
	}
	if req.TimeoutSeconds == 0 {
		req.TimeoutSeconds = DefaultExecTimeout
	}
	release, err := s.execs.take(caller, s.Quota.Execs, limitExecs)
	if err != nil {
		return ExecResult{}, err
	}
	defer release()
	ref, err := s.reach(ctx, caller, id, cocoonbox.RoleDriver, nil)
	if err != nil {
		return ExecResult{}, err
	}
	done := s.keepAwake(ctx, id)
	res, err := s.Link.Sandbox.Exec(ctx, ref, sandbox.ExecRequest{Argv: req.Argv, Cwd: req.Cwd, Env: req.Env, TimeoutSeconds: req.TimeoutSeconds, Stdin: req.Stdin})
	done()
	s.touch(ctx, id)
	if err != nil {
		return ExecResult{}, execError(err, req.TimeoutSeconds)
	}
	return ExecResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, nil
}

// ReadFile returns a file's content and permission bits (driver); files over MaxFileBytes are
// refused. Until the in-box agent serves files, the bytes travel base64-encoded through exec,
// in chunks that keep each answer well under the engine's output limit.
func (s *Service) ReadFile(ctx context.Context, caller string, id cocoonbox.BoxID, p string) ([]byte, uint32, error) {
	if err := checkPath(p); err != nil {
		return nil, 0, err
	}
	release, err := s.execs.take(caller, s.Quota.Execs, limitExecs) // a read is execs in the box
	if err != nil {
		return nil, 0, err
	}
	defer release()
	ref, err := s.reach(ctx, caller, id, cocoonbox.RoleDriver, nil)
	if err != nil {
		return nil, 0, err
	}
	defer s.touch(ctx, id)
	res, err := s.Link.Sandbox.Exec(ctx, ref, sandbox.ExecRequest{
		Argv: []string{"sh", "-c", `[ -e "$1" ] || { echo "No such file or directory" >&2; exit 3; }
[ -d "$1" ] && { echo "is a directory, not a file" >&2; exit 3; }
[ -f "$1" ] || { echo "is not a regular file" >&2; exit 3; }
stat -c '%s %a' "$1"`, "sh", p},
	})
	if err != nil {
		return nil, 0, execError(err, 0)
	}
	if res.ExitCode != 0 {
		return nil, 0, fileError(p, res)
	}
	size, mode, err := parseStat(p, res.Stdout)
	if err != nil {
		return nil, 0, err
	}
	if size > MaxFileBytes {
		return nil, 0, cocoonbox.Invalid("path", fmt.Sprintf("%s is %d bytes; files over %d bytes are not read through the API", quoteBox(p), size, MaxFileBytes))
	}
	const chunk = 4 << 20 // 4 MiB: 5.4 MiB of base64, under the engine's 8 MiB output limit
	out := make([]byte, 0, size)
	for off := int64(0); off < size || off == 0; off += chunk {
		res, err := s.Link.Sandbox.Exec(ctx, ref, sandbox.ExecRequest{Argv: []string{"sh", "-c",
			`dd if="$1" bs=1M skip="$2" count=4 status=none | base64 -w0`, "sh", p, strconv.FormatInt(off>>20, 10)}})
		if err != nil {
			return nil, 0, execError(err, 0)
		}
		if res.ExitCode != 0 {
			return nil, 0, fileError(p, res)
		}
		b, err := decodeChunk(p, res.Stdout, chunk)
		if err != nil {
			return nil, 0, err
		}
		// A file that grows while it is read is read on (to a short chunk), but never past the
		// limit, whatever the box answers.
		if len(out)+len(b) > MaxFileBytes {
			return nil, 0, cocoonbox.Invalid("path", fmt.Sprintf("%s grew past %d bytes while it was read", quoteBox(p), MaxFileBytes))
		}
		out = append(out, b...)
		if len(b) < chunk {
			break
		}
	}
	return out, mode, nil
}

// WriteFile writes a file (driver), creating its parent directories; mode 0 is 0644. The content
// goes to a temporary file beside the target, renamed over it only when complete, so a failed
// write leaves the old file intact.
func (s *Service) WriteFile(ctx context.Context, caller string, id cocoonbox.BoxID, p string, content []byte, mode uint32) (int64, error) {
	if err := checkPath(p); err != nil {
		return 0, err
	}
	if len(content) > MaxFileBytes {
		return 0, cocoonbox.Invalid("content", fmt.Sprintf("is %d bytes; at most %d", len(content), MaxFileBytes))
	}
	if mode > 0o7777 {
		return 0, cocoonbox.Invalid("mode", fmt.Sprintf("must be permission bits (at most 07777), got %o", mode))
	}
	if mode == 0 {
		mode = 0o644
	}
	release, err := s.execs.take(caller, s.Quota.Execs, limitExecs) // a write is execs in the box
	if err != nil {
		return 0, err
	}
	defer release()
	ref, err := s.reach(ctx, caller, id, cocoonbox.RoleDriver, nil)
	if err != nil {
		return 0, err
	}
	defer s.touch(ctx, id)
	var r [6]byte
	_, _ = rand.Read(r[:])
	tmp := p + ".cocoonbox-" + hex.EncodeToString(r[:])
	run := func(argv ...string) error {
		res, err := s.Link.Sandbox.Exec(ctx, ref, sandbox.ExecRequest{Argv: argv})
		if err != nil {
			return execError(err, 0)
		}
		if res.ExitCode != 0 {
			return fileError(p, res)
		}
		return nil
	}
	if err := run("sh", "-c", `mkdir -p "$(dirname "$1")" && : > "$2"`, "sh", p, tmp); err != nil {
		return 0, err
	}
	// Each exec carries up to 6 arguments of 96 KiB of base64 (under Linux's 128 KiB per
	// argument and the engine's 1 MiB request body).
	const argBytes, perExec = 96 << 10, 6
	enc := base64.StdEncoding.EncodeToString(content)
	for len(enc) > 0 {
		argv := []string{"sh", "-c", `f=$1; shift; for c in "$@"; do printf %s "$c"; done | base64 -d >> "$f"`, "sh", tmp}
		for i := 0; i < perExec && len(enc) > 0; i++ {
			n := min(argBytes, len(enc))
			argv = append(argv, enc[:n])
			enc = enc[n:]
		}
		if err := run(argv...); err != nil {
			_ = run("rm", "-f", tmp)
			return 0, err
		}
	}
	if err := run("sh", "-c", `chmod "$3" "$2" && mv -f "$2" "$1"`, "sh", p, tmp, strconv.FormatUint(uint64(mode), 8)); err != nil {
		_ = run("rm", "-f", tmp)
		return 0, err
	}
	return int64(len(content)), nil
}

// checked checks caller's role need on the box and, against its status, check (nil for none),
// and returns the caller's access and the status.
func (s *Service) checked(ctx context.Context, caller string, id cocoonbox.BoxID, need cocoonbox.Role, check func(workflows.Status) error) (access, workflows.Status, error) {
	a, err := s.authorize(ctx, caller, id, need)
	if err != nil {
		return access{}, workflows.Status{}, err
	}
	st, err := s.checkedStatus(ctx, id, check)
	if err != nil {
		return access{}, workflows.Status{}, err
	}
	return a, st, nil
}

// checkedStatus is the box's status from its workflow, checked against check (nil for none).
func (s *Service) checkedStatus(ctx context.Context, id cocoonbox.BoxID, check func(workflows.Status) error) (workflows.Status, error) {
	st, err := s.status(ctx, id)
	if err == nil && check != nil {
		err = check(st)
	}
	return st, err
}

// reach makes the checks of checked and returns a ref to the box's sandbox, waking the box
// through its workflow when it sleeps and the caller may wake it (driver). A call that needs
// only the role is let through on the box row when the row says the box runs, without asking
// the workflow (see running).
func (s *Service) reach(ctx context.Context, caller string, id cocoonbox.BoxID, need cocoonbox.Role, check func(workflows.Status) error) (sandbox.SandboxRef, error) {
	if s.Link == nil {
		return sandbox.SandboxRef{}, &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "boxes cannot be reached from this server", Err: errUnavailable}
	}
	a, err := s.authorize(ctx, caller, id, need)
	if err != nil {
		return sandbox.SandboxRef{}, err
	}
	if check == nil {
		if ref, ok := s.running(ctx, a.box); ok {
			return ref, nil
		}
	}
	st, err := s.checkedStatus(ctx, id, check)
	if err != nil {
		return sandbox.SandboxRef{}, err
	}
	return s.awake(ctx, caller, id, st, a.role)
}

// running returns a ref to the sandbox of a box whose row says it runs, and false when the row
// says anything else or the box's sandbox has changed since the row was read: the caller then
// asks the workflow. The row is enough because the workflow records a box's leaving running
// before the engine call that puts its sandbox to sleep, and does not make that call when the
// row cannot be written; an engine call on a sleeping sandbox would wake it behind the
// workflow. A status query costs about 4 ms and waits for any workflow task of the box under
// way; two row reads cost well under one.
func (s *Service) running(ctx context.Context, b store.Box) (sandbox.SandboxRef, bool) {
	if !workflows.Up(b.State) || b.SandboxID == "" {
		return sandbox.SandboxRef{}, false
	}
	ref, err := s.Link.Tokens.SandboxToken(ctx, string(b.ID))
	if err != nil || ref.ID != b.SandboxID {
		return sandbox.SandboxRef{}, false
	}
	return ref, true
}

// DefaultKeepAwakeEvery is Service.KeepAwakeEvery when zero: well inside the shortest idle period
// a box is given, so a command never outlives it.
const DefaultKeepAwakeEvery = 30 * time.Second

// keepAwake touches the box every KeepAwakeEvery until the returned func is called: an exec
// that runs longer than the box's idle period is work, and must not be hibernated under. A
// touch (not a pin) is what it sends, so an API process that dies mid-exec leaves nothing
// holding the box awake.
func (s *Service) keepAwake(ctx context.Context, id cocoonbox.BoxID) (done func()) {
	every := s.KeepAwakeEvery
	if every <= 0 {
		every = DefaultKeepAwakeEvery
	}
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.sendTouch(ctx, id) // paced already, and far slower than touchEvery
			case <-stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() { close(stop) }
}

// maxPath is Linux's PATH_MAX: no file in the box has a longer path.
const maxPath = 4096

func checkPath(p string) error {
	switch {
	case p == "":
		return cocoonbox.Invalid("path", "is required")
	case !path.IsAbs(p):
		return cocoonbox.Invalid("path", fmt.Sprintf("must be absolute, got %q", p))
	case strings.HasSuffix(p, "/"):
		return cocoonbox.Invalid("path", fmt.Sprintf("names a directory, got %q", p))
	case strings.ContainsRune(p, 0):
		return cocoonbox.Invalid("path", "must not contain NUL")
	case len(p) > maxPath:
		return cocoonbox.Invalid("path", fmt.Sprintf("is %d bytes, longer than the %d a path may be", len(p), maxPath))
	}
	return nil
}

// execError gives an engine error on exec its domain code and a message a person can act on.
func execError(err error, timeout int) error {
	switch {
	case errors.Is(err, sandbox.ErrInvalid):
		return &cocoonbox.Error{Code: cocoonbox.EInvalid, Message: "the box refused the command: " + sandbox.Message(err), Err: err}
	case errors.Is(err, sandbox.ErrTooLarge):
		return &cocoonbox.Error{Code: cocoonbox.EInvalid, Message: "the command's output is over 8 MiB; redirect it to a file", Err: err}
	case errors.Is(err, sandbox.ErrTimeout):
		return &cocoonbox.Error{Code: cocoonbox.EInvalid, Field: "timeout_seconds", Message: fmt.Sprintf("the command ran past %d s and was killed", timeout), Err: err}
	case errors.Is(err, sandbox.ErrNotFound):
		return &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "the box's sandbox is gone; wake the box to rebuild it", Err: err}
	case errors.Is(err, sandbox.ErrUnavailable), errors.Is(err, sandbox.ErrNoCapacity):
		return &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "the sandbox engine is busy or down; try again", Err: err}
	}
	return err
}

// fileError turns a failed file command into an error naming the path, quoting the box's own
// message (bounded: it is the box's text).
func fileError(p string, res sandbox.ExecResult) error {
	msg := strings.TrimSpace(res.Stderr)
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:] // the last line says why
	}
	if i := strings.LastIndex(msg, ": "); i >= 0 && strings.Contains(msg, p) {
		msg = msg[i+2:]
	}
	msg = quoteBox(p) + ": " + boxText(msg) // the caller's path is printable too, and bounded
	if strings.Contains(msg, "No such file") {
		return &cocoonbox.Error{Code: cocoonbox.ENotFound, Field: "path", Message: msg}
	}
	return cocoonbox.Invalid("path", msg)
}
