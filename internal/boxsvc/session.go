package boxsvc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// MaxWindowSize bounds a terminal's rows and columns.
const MaxWindowSize = 10000

// WindowSize is a terminal's size in characters.
type WindowSize struct{ Rows, Cols int }

// ShellStart is what Shell runs.
type ShellStart struct {
	Argv           []string // empty: the user's login shell
	Cwd            string   // empty: the user's home
	Env            map[string]string
	TimeoutSeconds int         // 0: none while the stream is open
	TTY            *WindowSize // a pseudo-terminal of this size; nil: pipes
	Term           string      // TERM with a tty; empty is xterm-256color
	User           string      // who runs it in the box; empty is the desktop's user
}

// ShellInput is one message from Shell's caller.
type ShellInput struct {
	Stdin    []byte
	StdinEOF bool
	Resize   *WindowSize
	Signal   string // INT, TERM, HUP, QUIT or KILL
}

// ShellOutput is the command's output; the last one has Exited and ExitCode (-1: killed).
type ShellOutput struct {
	Stdout, Stderr []byte
	Exited         bool
	ExitCode       int
	Started        bool // the first output, once the command runs: it takes input from then on
}

var (
	termName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)
	userName = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	signals  = []string{"INT", "TERM", "HUP", "QUIT", "KILL"}
)

func checkWindowSize(field string, w WindowSize) error {
	if w.Rows < 1 || w.Rows > MaxWindowSize || w.Cols < 1 || w.Cols > MaxWindowSize {
		return cocoonbox.Invalid(field, fmt.Sprintf("rows and cols must be 1 to %d, got %dx%d", MaxWindowSize, w.Cols, w.Rows))
	}
	return nil
}

func (st ShellStart) check() error {
	for i, a := range st.Argv {
		if strings.ContainsRune(a, 0) || (i == 0 && a == "") {
			return cocoonbox.Invalid("argv", fmt.Sprintf("argument %d is empty or holds a NUL byte", i))
		}
	}
	switch {
	case st.TimeoutSeconds < 0 || st.TimeoutSeconds > MaxExecTimeout:
		return cocoonbox.Invalid("timeout_seconds", fmt.Sprintf("must be 0 to %d, got %d", MaxExecTimeout, st.TimeoutSeconds))
	case st.Cwd != "" && !strings.HasPrefix(st.Cwd, "/"):
		return cocoonbox.Invalid("cwd", fmt.Sprintf("must be an absolute path, got %q", st.Cwd))
	case st.Term != "" && !termName.MatchString(st.Term):
		return cocoonbox.Invalid("term", fmt.Sprintf("is not a terminal name: %q", st.Term))
	case st.User != "" && !userName.MatchString(st.User):
		return cocoonbox.Invalid("user", fmt.Sprintf("is not a user name: %q", st.User))
	}
	for k := range st.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return cocoonbox.Invalid("env", fmt.Sprintf("invalid variable name %q", k))
		}
	}
	if st.TTY != nil {
		return checkWindowSize("tty", *st.TTY)
	}
	return nil
}

// Shell runs start in the box through its agent (driver), streaming: recv yields the caller's
// messages (io.EOF once the caller closed its side, which ends the command's input) and send
// takes the command's output, the exit last. A message the command cannot take (input after
// its end, a resize to nothing, an unknown signal) ends the call with an error naming the field;
// the command dies with the call. The box is kept awake while it runs, and a shell counts
// against the caller's concurrent execs.
func (s *Service) Shell(ctx context.Context, caller string, id cocoonbox.BoxID, start ShellStart,
	recv func() (ShellInput, error), send func(ShellOutput) error) error {
	if err := start.check(); err != nil {
		return err
	}
	return s.onSession(ctx, caller, id, func(ctx context.Context, c agentvmv1.SessionClient) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.Process(ctx)
		if err != nil {
			return err
		}
		ps := &agentvmv1.ProcessStart{Argv: start.Argv, Cwd: start.Cwd, Env: start.Env, TimeoutSeconds: int32(start.TimeoutSeconds),
			Term: start.Term, User: start.User}
		if start.TTY != nil {
			ps.Tty = &agentvmv1.WindowSize{Rows: uint32(start.TTY.Rows), Cols: uint32(start.TTY.Cols)}
		}
		if err := stream.Send(&agentvmv1.ProcessInput{Start: ps}); err != nil {
			return err
		}
		var (
			mu       sync.Mutex
			inputErr error // the caller's bad message, which ends the call
		)
		go func() {
			eof := false
			for {
				in, err := recv()
				if errors.Is(err, io.EOF) {
					if !eof && start.TTY == nil {
						_ = stream.Send(&agentvmv1.ProcessInput{StdinEof: true})
					}
					_ = stream.CloseSend()
					return
				}
				if err == nil {
					err = checkShellInput(in, eof, start.TTY != nil)
				}
				if err != nil {
					mu.Lock()
					inputErr = err
					mu.Unlock()
					cancel()
					return
				}
				eof = eof || in.StdinEOF
				msg := &agentvmv1.ProcessInput{Stdin: in.Stdin, StdinEof: in.StdinEOF, Signal: in.Signal}
				if in.Resize != nil {
					msg.Resize = &agentvmv1.WindowSize{Rows: uint32(in.Resize.Rows), Cols: uint32(in.Resize.Cols)}
				}
				if stream.Send(msg) != nil {
					return // the command ended: Recv below says how
				}
			}
		}()
		for {
			out, err := stream.Recv()
			if err != nil {
				mu.Lock()
				defer mu.Unlock()
				if inputErr != nil {
					return inputErr
				}
				if errors.Is(err, io.EOF) {
					return cocoonbox.Errorf(cocoonbox.EUnavailable, "the box's agent ended the command's stream without its exit; try again")
				}
				return err
			}
			if err := send(ShellOutput{Stdout: out.GetStdout(), Stderr: out.GetStderr(), Exited: out.GetExited(), ExitCode: int(out.GetExitCode()), Started: out.GetStarted()}); err != nil {
				return err
			}
			if out.GetExited() {
				return nil
			}
		}
	})
}

// CheckShell says whether caller may open a shell in the box (driver), before anything is
// started: the web terminal's ticket is issued, and its connection accepted, only then.
func (s *Service) CheckShell(ctx context.Context, caller string, id cocoonbox.BoxID) error {
	_, _, err := s.checked(ctx, caller, id, cocoonbox.RoleDriver, nil)
	return err
}

// checkShellInput refuses what a running command cannot take; eof says its input has ended.
func checkShellInput(in ShellInput, eof, tty bool) error {
	switch {
	case len(in.Stdin) > 0 && eof:
		return cocoonbox.Invalid("stdin", "sent after stdin_eof closed the command's input")
	case in.Resize != nil && !tty:
		return cocoonbox.Invalid("resize", "the command has no terminal to resize (start it with a tty)")
	case in.Signal != "" && !slices.Contains(signals, strings.TrimPrefix(strings.ToUpper(in.Signal), "SIG")):
		return cocoonbox.Invalid("signal", fmt.Sprintf("want %s, got %q", strings.Join(signals, ", "), in.Signal))
	}
	if in.Resize != nil {
		return checkWindowSize("resize", *in.Resize)
	}
	return nil
}

// onSession makes call on the box's agent session service for a driver, waking the box, with
// the box kept awake while call runs and the call counted against the caller's execs.
func (s *Service) onSession(ctx context.Context, caller string, id cocoonbox.BoxID, call func(context.Context, agentvmv1.SessionClient) error) error {
	return s.onBox(ctx, caller, id, func(ctx context.Context, box boxlink.Box) error {
		return s.Link.Session(ctx, box, call)
	})
}

// onBox is onSession's reach of the box for a call that uses the link its own way.
func (s *Service) onBox(ctx context.Context, caller string, id cocoonbox.BoxID, call func(context.Context, boxlink.Box) error) error {
	if s.Link == nil || s.Link.Credentials == nil {
		return &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "boxes cannot be reached from this server", Err: errUnavailable}
	}
	release, err := s.execs.take(caller, s.Quota.Execs, limitExecs)
	if err != nil {
		return err
	}
	defer release()
	ref, err := s.reach(ctx, caller, id, cocoonbox.RoleDriver, nil)
	if err != nil {
		return err
	}
	box, err := s.Link.At(id, ref)
	if err != nil {
		return err
	}
	done := s.keepAwake(ctx, id)
	defer func() { done(); s.touch(ctx, id) }()
	return call(ctx, box)
}
