package agentvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// DesktopUser is the box's person: a Process call without a user runs as this one when the box
// has it (the desktop image's uid 1000), else as the agent's own user.
const DesktopUser = "user"

// MaxWindowSize bounds a terminal's rows and columns.
const MaxWindowSize = 10000

// processSignals are the signals a Process call may send, by name.
var processSignals = map[string]syscall.Signal{
	"INT": syscall.SIGINT, "TERM": syscall.SIGTERM, "HUP": syscall.SIGHUP, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
}

// Process runs a command with streamed input, on a pseudo-terminal when start asks for one. Its
// output goes back in the order the command wrote it; the last message carries the exit code.
// The command's process group dies with the call.
func (s *Server) Process(stream grpc.BidiStreamingServer[agentvmv1.ProcessInput, agentvmv1.ExecOutput]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "start: the first message must say what to run")
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	if t := start.GetTimeoutSeconds(); t < 0 {
		return status.Errorf(codes.InvalidArgument, "timeout_seconds: must not be negative, got %d", t)
	} else if t > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		defer cancel()
	}
	cmd, err := processCommand(ctx, start)
	if err != nil {
		return err
	}
	p := &process{cmd: cmd, out: make(chan *agentvmv1.ExecOutput, 16), cancel: cancel}
	if err := p.start(start.GetTty()); err != nil {
		return err
	}
	if err := stream.Send(&agentvmv1.ExecOutput{Started: true}); err != nil {
		cancel()
		_ = p.cmd.Wait()
		return err
	}
	go p.input(stream, first)

	var sendErr error
	for msg := range p.out { // drained to the end so the command's writers never block
		if sendErr == nil {
			sendErr = stream.Send(msg)
			if sendErr != nil {
				cancel() // the caller is gone: so is the command
			}
		}
	}
	if sendErr != nil {
		return sendErr
	}
	if err := p.failed(); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if err := stream.Context().Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	code := 0
	var exitErr *exec.ExitError
	switch {
	case p.waitErr == nil:
	case errors.As(p.waitErr, &exitErr):
		code = exitErr.ExitCode() // -1 when killed by a signal, e.g. on timeout
	default:
		return status.Errorf(codes.Internal, "wait for the command: %v", p.waitErr)
	}
	return stream.Send(&agentvmv1.ExecOutput{Exited: true, ExitCode: int32(code)})
}

// processCommand builds the command start names, as the user it names, in that user's
// environment.
func processCommand(ctx context.Context, start *agentvmv1.ProcessStart) (*exec.Cmd, error) {
	if tty := start.GetTty(); tty != nil {
		if err := checkWindowSize("tty", tty); err != nil {
			return nil, err
		}
	}
	if c := start.GetCwd(); c != "" && !path.IsAbs(c) {
		return nil, status.Errorf(codes.InvalidArgument, "cwd: must be an absolute path, got %q", c)
	}
	u, cred, err := processUser(start.GetUser())
	if err != nil {
		return nil, err
	}
	shell := loginShell(u.Username)
	argv := start.GetArgv()
	var cmd *exec.Cmd
	if len(argv) == 0 {
		cmd = exec.CommandContext(ctx, shell)
		cmd.Args = []string{"-" + path.Base(shell)} // a login shell, as a terminal's is
	} else {
		if argv[0] == "" {
			return nil, status.Error(codes.InvalidArgument, "argv: the command is empty")
		}
		cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
		if errors.Is(cmd.Err, exec.ErrNotFound) {
			return nil, status.Errorf(codes.InvalidArgument, "argv: %q is not a command in the box's PATH", argv[0])
		}
	}
	cmd.Dir = start.GetCwd()
	if cmd.Dir == "" {
		cmd.Dir = u.HomeDir
	}
	if fi, err := os.Stat(cmd.Dir); err != nil || !fi.IsDir() {
		return nil, status.Errorf(codes.InvalidArgument, "cwd: %q is not a directory in the box", cmd.Dir)
	}
	cmd.Env = []string{
		"HOME=" + u.HomeDir, "USER=" + u.Username, "LOGNAME=" + u.Username, "SHELL=" + shell,
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
	}
	if d := os.Getenv("DISPLAY"); d != "" {
		cmd.Env = append(cmd.Env, "DISPLAY="+d)
	}
	if start.GetTty() != nil {
		term := start.GetTerm()
		if term == "" {
			term = "xterm-256color"
		}
		cmd.Env = append(cmd.Env, "TERM="+term)
	}
	for k, v := range start.GetEnv() {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
			return nil, status.Errorf(codes.InvalidArgument, "env: invalid variable %q", k)
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 500 * time.Millisecond // a background child holding the output does not hold the call
	return cmd, nil
}

// processUser resolves the user a command runs as: the named one, or DesktopUser when the box
// has it, else the agent's own. The credential is nil for the agent's own user.
func processUser(name string) (*user.User, *syscall.Credential, error) {
	var (
		u   *user.User
		err error
	)
	switch name {
	case "":
		if u, err = user.Lookup(DesktopUser); err != nil {
			u, err = user.Current()
		}
	default:
		u, err = user.Lookup(name)
		if err != nil {
			return nil, nil, status.Errorf(codes.InvalidArgument, "user: %q is not a user of the box", name)
		}
	}
	if err != nil {
		return nil, nil, status.Errorf(codes.Internal, "look up the user: %v", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, nil, status.Errorf(codes.Internal, "user %q has a uid or gid that is not a number", u.Username)
	}
	if int(uid) == os.Getuid() {
		return u, nil, nil
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(g))
			}
		}
	}
	return u, cred, nil
}

// loginShell is the user's shell from /etc/passwd, else /bin/sh.
func loginShell(name string) string {
	data, err := os.ReadFile("/etc/passwd")
	if err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			f := strings.Split(line, ":")
			if len(f) == 7 && f[0] == name && path.IsAbs(f[6]) {
				if _, err := os.Stat(f[6]); err == nil {
					return f[6]
				}
			}
		}
	}
	return "/bin/sh"
}

func checkWindowSize(field string, w *agentvmv1.WindowSize) error {
	if w.GetRows() < 1 || w.GetRows() > MaxWindowSize || w.GetCols() < 1 || w.GetCols() > MaxWindowSize {
		return status.Errorf(codes.InvalidArgument, "%s: rows and cols must be 1 to %d, got %dx%d", field, MaxWindowSize, w.GetCols(), w.GetRows())
	}
	return nil
}

// resizeHolds are when, after a resize, the terminal is set to it again if it no longer has it.
// Each time readline starts reading a line it reads the terminal's size and writes the same size
// back (rltty.c, set_winsize), so a resize that lands between the two is undone; under gVisor
// that happened to about 1 resize in 200 sent while bash finished a line.
var resizeHolds = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 250 * time.Millisecond, time.Second}

// resize sets the terminal to r and holds it there for a moment (resizeHolds), unless another
// resize comes first. A program that sets the size itself within that moment is overruled: the
// caller's window is the terminal's size.
func (p *process) resize(r *agentvmv1.WindowSize) {
	want := unix.Winsize{Row: uint16(r.GetRows()), Col: uint16(r.GetCols())}
	p.mu.Lock()
	p.resizes++
	n := p.resizes
	p.mu.Unlock()
	_ = windowSize(p.tty, &want)
	go func() {
		start := time.Now()
		for _, d := range resizeHolds {
			time.Sleep(time.Until(start.Add(d)))
			p.mu.Lock()
			newer := p.resizes != n
			p.mu.Unlock()
			if newer || windowSize(p.tty, &want) != nil {
				return // a later resize holds its own; or the command ended and closed its terminal
			}
		}
	}()
}

// windowSize sets the terminal whose master is f to want if it has another size. The ioctls run
// on f's descriptor held open for them (a terminal closed meanwhile is an error, never another
// file that took its number), with the size's pointer inside the syscall.
func windowSize(f *os.File, want *unix.Winsize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		got, err := unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ)
		if err != nil {
			ioErr = err
			return
		}
		if got.Row != want.Row || got.Col != want.Col {
			ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, want)
		}
	}); err != nil {
		return err
	}
	return ioErr
}

// process is a running Process command: its input side and its output.
type process struct {
	cmd     *exec.Cmd
	out     chan *agentvmv1.ExecOutput // closed once the command has exited and its output is sent
	waitErr error                      // set before out closes
	cancel  context.CancelFunc         // kills the command

	// Only the input goroutine touches these after start.
	stdin io.WriteCloser // the pipe, or the terminal's master
	tty   *os.File       // the terminal's master, nil without one
	eof   bool

	mu       sync.Mutex
	inputErr error // the caller's message the command could not take; the call ends with it
	resizes  int   // how many resizes the caller sent: a hold ends once a later one came
}

// failed is the caller's message that ended the call, if one did.
func (p *process) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inputErr
}

// start starts the command, on a terminal of size tty when that is set.
func (p *process) start(tty *agentvmv1.WindowSize) error {
	if tty != nil {
		p.cmd.SysProcAttr.Setsid, p.cmd.SysProcAttr.Setctty = true, true
		master, err := pty.StartWithAttrs(p.cmd, &pty.Winsize{Rows: uint16(tty.GetRows()), Cols: uint16(tty.GetCols())}, p.cmd.SysProcAttr)
		if err != nil {
			return status.Errorf(codes.FailedPrecondition, "start the command on a terminal: %v", err)
		}
		p.tty, p.stdin = master, master
		read := make(chan struct{})
		go func() {
			defer close(read)
			_, _ = io.Copy(chanWriter(func(b []byte) { p.out <- &agentvmv1.ExecOutput{Stdout: b} }), master)
		}()
		go func() {
			p.waitErr = p.cmd.Wait()
			// The terminal reads EIO once every holder of its other end is gone; a background
			// child that keeps it gets p.cmd.WaitDelay, as with pipes.
			select {
			case <-read:
			case <-time.After(p.cmd.WaitDelay):
			}
			_ = master.Close()
			<-read
			close(p.out)
		}()
		return nil
	}
	p.cmd.SysProcAttr.Setpgid = true
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		return status.Errorf(codes.Internal, "stdin pipe: %v", err)
	}
	p.stdin = stdin
	p.cmd.Stdout = chanWriter(func(b []byte) { p.out <- &agentvmv1.ExecOutput{Stdout: b} })
	p.cmd.Stderr = chanWriter(func(b []byte) { p.out <- &agentvmv1.ExecOutput{Stderr: b} })
	if err := p.cmd.Start(); err != nil {
		return status.Errorf(codes.FailedPrecondition, "start the command: %v", err)
	}
	go func() { p.waitErr = p.cmd.Wait(); close(p.out) }()
	return nil
}

// input applies the caller's messages until its stream ends: stdin, its end, resizes, signals.
// A message the command cannot take ends the call with the reason, and the command with it.
func (p *process) input(stream grpc.BidiStreamingServer[agentvmv1.ProcessInput, agentvmv1.ExecOutput], msg *agentvmv1.ProcessInput) {
	for {
		if err := p.apply(msg); err != nil {
			p.mu.Lock()
			p.inputErr = err
			p.mu.Unlock()
			p.cancel()
			return
		}
		var err error
		if msg, err = stream.Recv(); err != nil {
			return // the caller closed its side (io.EOF) or went: the command runs on to its end or its ctx
		}
	}
}

// apply carries out one input message.
func (p *process) apply(msg *agentvmv1.ProcessInput) error {
	if len(msg.GetStdin()) > 0 {
		if p.eof {
			return fmt.Errorf("stdin: the command's input was closed (stdin_eof)")
		}
		if _, err := p.stdin.Write(msg.GetStdin()); err != nil {
			return nil // the command stopped reading (it exited): its exit says the rest
		}
	}
	if msg.GetStdinEof() && !p.eof {
		p.eof = true
		if p.tty != nil {
			_, _ = p.tty.Write([]byte{4}) // the terminal's end-of-file (^D) at the start of a line
		} else {
			_ = p.stdin.Close()
		}
	}
	if r := msg.GetResize(); r != nil && p.tty != nil {
		if err := checkWindowSize("resize", r); err != nil {
			return err
		}
		p.resize(r)
	}
	if name := msg.GetSignal(); name != "" {
		sig, ok := processSignals[strings.TrimPrefix(strings.ToUpper(name), "SIG")]
		if !ok {
			return fmt.Errorf("signal: want INT, TERM, HUP, QUIT or KILL, got %q", name)
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
	return nil
}
