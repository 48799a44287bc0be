package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxExecCommand() *cli.Command {
	return &cli.Command{
		Name:  "exec",
		Usage: "run a command to completion in a box (waking it) and exit with its exit code",
		Description: "The command runs as root in /root. Its stdout and stderr stream to this stdout and stderr as\n" +
			"they come, and this standard input streams to it (unless it is a terminal, or -n); cocoonbox\n" +
			"exits with the command's exit code (255 when a signal killed it). Ctrl-C sends SIGINT to the\n" +
			"command, a second one ends the call; the box stays awake while the command runs. With --output\n" +
			"json, stdout is one JSON document {exit_code, stdout, stderr} at the end and the exit code is\n" +
			"still the command's. When the call itself fails, the exit codes of `cocoonbox --help` apply.\n\n" +
			"   cocoonbox box exec mybox -- apt-get install -y jq\n" +
			"   cocoonbox box exec mybox -- sh -c 'wc -c' < big.iso",
		ArgsUsage: "BOX -- CMD [ARG...]",
		Flags: apiFlags(
			&cli.StringFlag{Name: "cwd", Usage: "working directory in the box (default /root)"},
			&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "KEY=VALUE added to the command's environment (repeatable)"},
			&cli.DurationFlag{Name: "timeout", Usage: "kill the command after this long (1s-1h; default 60s)"},
			&cli.BoolFlag{Name: "no-stdin", Aliases: []string{"n"}, Usage: "do not pass this command's standard input on (it is passed unless it is a terminal)"},
		),
		Action: func(c *cli.Context) error {
			box, argv, err := execArgs(c)
			if err != nil {
				return err
			}
			req := &cbv1.ExecRequest{Box: box, Argv: argv, Cwd: c.String("cwd")}
			if req.Env, err = envFlag(c, "box exec"); err != nil {
				return err
			}
			if d := c.Duration("timeout"); d != 0 {
				if d < time.Second || d > time.Hour {
					return usageError("box exec: --timeout: want 1s to 1h, got %s", d)
				}
				req.TimeoutSeconds = int32(math.Ceil(d.Seconds()))
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			resp, err := execStreamed(c, s, boxes, req)
			if errors.Is(err, errNoShell) {
				resp, err = execBuffered(c, s, boxes, req)
			}
			if err != nil {
				return err
			}
			if code := resp.GetExitCode(); code != 0 {
				return cli.Exit("", exitStatus(code))
			}
			return nil
		},
	}
}

// execStreamed runs the command through BoxService.Shell: its output is written as it comes
// (collected for --output json), its standard input streamed in unless it is a terminal or -n.
func execStreamed(c *cli.Context, s *session, boxes cbv1.BoxServiceClient, req *cbv1.ExecRequest) (*cbv1.ExecResponse, error) {
	sio := streamIO{in: c.App.Reader, out: s.out.w, errOut: s.out.errw}
	_, tty := terminal(c.App.Reader)
	sio.stdin = !c.Bool("no-stdin") && !tty
	var out, errOut bytes.Buffer
	if s.out.json {
		sio.out, sio.errOut = &out, &errOut
	}
	start := &cbv1.ShellStart{Box: req.GetBox(), Argv: req.GetArgv(), Cwd: req.GetCwd(), Env: req.GetEnv(), TimeoutSeconds: req.GetTimeoutSeconds(), User: "root"}
	if start.TimeoutSeconds == 0 {
		start.TimeoutSeconds = defaultExecTimeout
	}
	if start.Cwd == "" {
		start.Cwd = "/root"
	}
	code, err := runStream(c.Context, boxes, start, sio)
	if errors.Is(err, errNoShell) {
		return nil, err
	}
	if err != nil {
		return nil, apiError(err)
	}
	resp := &cbv1.ExecResponse{ExitCode: code, Stdout: out.String(), Stderr: errOut.String()}
	if s.out.json {
		if err := writeJSON(s.out.w, resp); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// defaultExecTimeout is box exec's timeout when none is given, as the API's unary Exec.
const defaultExecTimeout = 60

// execBuffered runs the command through the unary Exec of an API server that predates Shell:
// its standard input is read first (at most maxExecStdin), its output written at the end.
func execBuffered(c *cli.Context, s *session, boxes cbv1.BoxServiceClient, req *cbv1.ExecRequest) (*cbv1.ExecResponse, error) {
	if !c.Bool("no-stdin") {
		var err error
		if req.Stdin, err = execStdin(c.App.Reader); err != nil {
			return nil, err
		}
	}
	resp, err := boxes.Exec(c.Context, req)
	if err != nil {
		return nil, apiError(err)
	}
	if s.out.json {
		err = writeJSON(s.out.w, resp)
	} else {
		_, err = s.out.w.Write([]byte(resp.GetStdout()))
		if err == nil {
			_, err = s.out.errw.Write([]byte(resp.GetStderr()))
		}
	}
	return resp, err
}

// maxExecStdin is what an exec's standard input may be (sandbox.MaxExecStdin, the engine's).
const maxExecStdin = 512 << 10

// execStdin reads the standard input to pass to the command: none from a terminal (a person
// typing would wait for nothing), else all of it, refused past maxExecStdin.
func execStdin(r io.Reader) ([]byte, error) {
	if f, ok := r.(*os.File); ok {
		if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice != 0 {
			return nil, nil
		}
	}
	b, err := io.ReadAll(io.LimitReader(r, maxExecStdin+1))
	if err != nil {
		return nil, fmt.Errorf("read standard input: %w", err)
	}
	if len(b) > maxExecStdin {
		return nil, usageError("box exec: standard input is over %d KiB; copy the file in with box cp, or give -n", maxExecStdin>>10)
	}
	return b, nil
}

// execArgs splits `BOX [flags] -- CMD ARGS...` or `BOX CMD ARGS...`. Flags may follow BOX only
// when "--" separates them from the command, whose own flags are never parsed here.
func execArgs(c *cli.Context) (box string, argv []string, err error) {
	in := c.Args().Slice()
	const usage = "BOX -- CMD [ARG...]"
	if i := slices.Index(in, "--"); i >= 0 {
		before, after := in[:i], in[i+1:]
		// Parse any flags between BOX and "--" with the same rules as other commands.
		args, err := positionalOf(c, before, usage, 1, 1)
		if err != nil {
			return "", nil, err
		}
		box, argv = args[0], after
	} else if len(in) > 0 {
		box, argv = in[0], in[1:]
	}
	if box == "" || len(argv) == 0 {
		return "", nil, usageError("usage: %s %s", c.Command.HelpName, usage)
	}
	return box, argv, nil
}
