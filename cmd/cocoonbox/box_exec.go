package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxExecCommand() *cli.Command {
	return &cli.Command{
		Name:  "exec",
		Usage: "run a command to completion in a box (waking it) and exit with its exit code",
		Description: "The command's stdout goes to stdout and its stderr to stderr; cocoonbox exits with the\n" +
			"command's exit code. With --output json, stdout is one JSON document {exit_code, stdout, stderr}\n" +
			"and the exit code is still the command's. When the call itself fails, the exit codes of\n" +
			"`cocoonbox --help` apply.",
		ArgsUsage: "BOX -- CMD [ARG...]",
		Flags: apiFlags(
			&cli.StringFlag{Name: "cwd", Usage: "working directory in the box (default /root)"},
			&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "KEY=VALUE added to the command's environment (repeatable)"},
			&cli.DurationFlag{Name: "timeout", Usage: "kill the command after this long (1s-1h; default 60s)"},
			&cli.BoolFlag{Name: "no-stdin", Aliases: []string{"n"}, Usage: "do not pass this command's standard input on (it is passed, up to 512 KiB, unless it is a terminal)"},
		),
		Action: func(c *cli.Context) error {
			box, argv, err := execArgs(c)
			if err != nil {
				return err
			}
			req := &cbv1.ExecRequest{Box: box, Argv: argv, Cwd: c.String("cwd")}
			for _, kv := range c.StringSlice("env") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usageError("box exec: --env: want KEY=VALUE, got %q", kv)
				}
				if req.Env == nil {
					req.Env = map[string]string{}
				}
				req.Env[k] = v
			}
			if d := c.Duration("timeout"); d != 0 {
				if d < time.Second || d > time.Hour {
					return usageError("box exec: --timeout: want 1s to 1h, got %s", d)
				}
				req.TimeoutSeconds = int32(math.Ceil(d.Seconds()))
			}
			if !c.Bool("no-stdin") {
				if req.Stdin, err = execStdin(c.App.Reader); err != nil {
					return err
				}
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			resp, err := boxes.Exec(c.Context, req)
			if err != nil {
				return apiError(err)
			}
			if s.out.json {
				err = writeJSON(s.out.w, resp)
			} else {
				_, err = s.out.w.Write([]byte(resp.GetStdout()))
				if err == nil {
					_, err = s.out.errw.Write([]byte(resp.GetStderr()))
				}
			}
			if err != nil {
				return err
			}
			if code := resp.GetExitCode(); code != 0 {
				return cli.Exit("", int(code))
			}
			return nil
		},
	}
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
