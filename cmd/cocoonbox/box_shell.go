package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxShellCommand() *cli.Command {
	return &cli.Command{
		Name:  "shell",
		Usage: "open a terminal in a box: a login shell, or CMD, on this terminal",
		Description: "Runs as the desktop's user (--user root for root) in their home. On a terminal, this one is\n" +
			"put in raw mode for the session, follows its size, and is restored at the end; Ctrl-C goes to\n" +
			"what runs in the box. cocoonbox exits with the command's exit status. Without a terminal on\n" +
			"stdin the command gets pipes, as with box exec. The box stays awake while the shell is open.\n\n" +
			"   cocoonbox box shell mybox\n" +
			"   cocoonbox box shell mybox -- htop",
		ArgsUsage: "BOX [-- CMD [ARG...]]",
		Flags: apiFlags(
			&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "who runs it in the box (default: the desktop's user)"},
			&cli.StringFlag{Name: "cwd", Usage: "working directory in the box (default: the user's home)"},
			&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "KEY=VALUE added to the environment (repeatable)"},
		),
		Action: func(c *cli.Context) error {
			box, argv, err := shellArgs(c)
			if err != nil {
				return err
			}
			env, err := envFlag(c, "box shell")
			if err != nil {
				return err
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			start := &cbv1.ShellStart{Box: box, Argv: argv, Cwd: c.String("cwd"), Env: env, User: c.String("user")}
			in, tty := terminal(c.App.Reader)
			if tty {
				start.Tty = windowSizeOf(in)
				start.Term = os.Getenv("TERM")
			}
			code, err := runStream(c.Context, boxes, start, streamIO{in: c.App.Reader, stdin: true, out: s.out.w, errOut: s.out.errw, tty: in})
			if err != nil {
				return apiError(err)
			}
			if code != 0 {
				return cli.Exit("", exitStatus(code))
			}
			return nil
		},
	}
}

// shellArgs splits `BOX [-- CMD ARGS...]`.
func shellArgs(c *cli.Context) (box string, argv []string, err error) {
	in := c.Args().Slice()
	const usage = "BOX [-- CMD [ARG...]]"
	if i := slices.Index(in, "--"); i >= 0 {
		args, err := positionalOf(c, in[:i], usage, 1, 1)
		if err != nil {
			return "", nil, err
		}
		return args[0], in[i+1:], nil
	}
	args, err := positionalOf(c, in, usage, 1, 1)
	if err != nil {
		return "", nil, err
	}
	return args[0], nil, nil
}

// envFlag reads the repeatable --env KEY=VALUE.
func envFlag(c *cli.Context, cmd string) (map[string]string, error) {
	var env map[string]string
	for _, kv := range c.StringSlice("env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError("%s: --env: want KEY=VALUE, got %q", cmd, kv)
		}
		if env == nil {
			env = map[string]string{}
		}
		env[k] = v
	}
	return env, nil
}

// terminal returns r as a terminal's file, and whether it is one.
func terminal(r io.Reader) (*os.File, bool) {
	f, ok := r.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil, false
	}
	return f, true
}

func windowSizeOf(f *os.File) *cbv1.WindowSize {
	cols, rows, err := term.GetSize(int(f.Fd()))
	if err != nil || cols < 1 || rows < 1 {
		return &cbv1.WindowSize{Rows: 24, Cols: 80}
	}
	return &cbv1.WindowSize{Rows: uint32(rows), Cols: uint32(cols)}
}

// exitStatus is the exit status cocoonbox gives for a command's exit code: the code, or 255
// for a command killed by a signal (-1).
func exitStatus(code int32) int {
	if code < 0 || code > 255 {
		return 255
	}
	return int(code)
}

// streamIO is where a streamed command's bytes come from and go.
type streamIO struct {
	in          io.Reader
	stdin       bool // pass in on; else the command's input is closed at once
	out, errOut io.Writer
	tty         *os.File // the local terminal in raw mode for the session; nil without one
}

// errNoShell is returned by runStream when the API server does not stream commands (it
// predates Shell) and nothing was sent yet, so the caller may run the command another way.
var errNoShell = errors.New("the API server does not stream commands")

// runStream runs start through BoxService.Shell: input from io.in as it comes, output to io.out
// and io.errOut as it arrives. On a terminal, the terminal is raw while it runs and follows its
// size; without one, Ctrl-C and SIGTERM go to the command as signals, and a second Ctrl-C ends
// the call. It returns the command's exit code.
func runStream(ctx context.Context, boxes cbv1.BoxServiceClient, start *cbv1.ShellStart, sio streamIO) (int32, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := boxes.Shell(ctx)
	if err != nil {
		return 0, err
	}
	var mu sync.Mutex // gRPC streams take one sender at a time
	send := func(m *cbv1.ShellRequest) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.Send(m)
	}
	if err := send(&cbv1.ShellRequest{Start: start}); err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	first, err := stream.Recv()
	if status.Code(err) == codes.Unimplemented && strings.Contains(status.Convert(err).Message(), "method Shell") {
		return 0, errNoShell
	}
	if err != nil {
		return 0, err
	}
	if !first.GetStarted() {
		return 0, fmt.Errorf("the API answered a command's start with output before it ran")
	}

	if sio.tty != nil {
		old, err := term.MakeRaw(int(sio.tty.Fd()))
		if err != nil {
			return 0, fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		defer term.Restore(int(sio.tty.Fd()), old) //nolint:errcheck // the best that can be done
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-winch:
					_ = send(&cbv1.ShellRequest{Resize: windowSizeOf(sio.tty)})
				case <-ctx.Done():
					return
				}
			}
		}()
	} else {
		sigs := make(chan os.Signal, 2)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sigs)
		go func() {
			interrupts := 0
			for {
				select {
				case sig := <-sigs:
					name := "TERM"
					if sig == os.Interrupt {
						name = "INT"
						if interrupts++; interrupts > 1 {
							cancel() // a second Ctrl-C: the command dies with the call
							return
						}
					}
					_ = send(&cbv1.ShellRequest{Signal: name})
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		if !sio.stdin {
			_ = send(&cbv1.ShellRequest{StdinEof: true})
			return
		}
		buf := make([]byte, 32<<10)
		for {
			n, err := sio.in.Read(buf)
			if n > 0 {
				if send(&cbv1.ShellRequest{Stdin: append([]byte(nil), buf[:n]...)}) != nil {
					return
				}
			}
			if err != nil {
				if sio.tty == nil {
					_ = send(&cbv1.ShellRequest{StdinEof: true})
				}
				return
			}
		}
	}()
	for {
		msg, err := stream.Recv()
		if err != nil {
			return 0, err
		}
		if len(msg.GetStdout()) > 0 {
			if _, err := sio.out.Write(msg.GetStdout()); err != nil {
				return 0, err
			}
		}
		if len(msg.GetStderr()) > 0 {
			if _, err := sio.errOut.Write(msg.GetStderr()); err != nil {
				return 0, err
			}
		}
		if msg.GetExited() {
			return msg.GetExitCode(), nil
		}
	}
}
