package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func runFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "the model to run on (default: the server's)"},
		&cli.IntFlag{Name: "max-steps", Usage: "stop the run after this many model turns (default: the server's)"},
		&cli.Int64Flag{Name: "max-tokens", Usage: "stop the run before a model call once its calls used this many input and output tokens (default: no bound)"},
		&cli.BoolFlag{Name: "record", Usage: "record the box's desktop while the run goes, to replay beside its steps (box recordings)"},
	}
}

// startRun starts a run of the task in args[1:] on box args[0].
func startRun(c *cli.Context, agent cbv1.AgentServiceClient, args []string) (*cbv1.AgentRun, error) {
	if n := c.Int("max-steps"); n < 0 {
		return nil, usageError("--max-steps must be positive")
	}
	if n := c.Int64("max-tokens"); n < 0 {
		return nil, usageError("--max-tokens must be positive")
	}
	run, err := agent.StartRun(c.Context, &cbv1.StartRunRequest{
		Box: args[0], Task: strings.Join(args[1:], " "), Model: c.String("model"), MaxSteps: int32(c.Int("max-steps")),
		MaxTokens: c.Int64("max-tokens"), Record: c.Bool("record"),
	})
	return run, apiError(err)
}

func agentRunCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "give a box's agent a task and follow its steps",
		Description: "Prints the run's ID, then each step as the agent takes it, until the run ends. Ctrl-C stops\n" +
			"following; the run goes on. With --detach only the run's ID is printed. With --output json\n" +
			"each line is one JSON event, as agent watch prints them (--detach: the run).\n\n" +
			"With --attempts N the box is forked N ways and the task runs on each fork; a judge then picks\n" +
			"the attempt that did best. The box is unchanged until the pick is accepted (--accept, or\n" +
			"agent accept later, which deletes the forks).",
		ArgsUsage: "BOX TASK...",
		Flags: apiFlags(append(runFlags(),
			&cli.BoolFlag{Name: "detach", Aliases: []string{"d"}, Usage: "start the run and return at once"},
			&cli.IntFlag{Name: "attempts", Usage: "run the task on `N` forks of the box (2 to 8) and let a judge pick the best"},
			&cli.BoolFlag{Name: "accept", Usage: "with --attempts: give the box the state of the judge's pick at once"})...),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX TASK...", 2, -1)
			if err != nil {
				return err
			}
			s, agent, err := agentClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			if c.IsSet("attempts") {
				return runAttempts(c, s, agent, args)
			}
			run, err := startRun(c, agent, args)
			if err != nil {
				return err
			}
			if c.Bool("detach") {
				err := s.out.result(run, func(w io.Writer) error {
					_, err := fmt.Fprintln(w, run.GetId())
					return err
				})
				if err == nil && !s.out.json {
					s.out.note("follow it with: cocoonbox agent watch %s", run.GetId())
				}
				return err
			}
			if s.out.json {
				if err := writeJSONLine(s.out.w, &cbv1.WatchRunEvent{Event: &cbv1.WatchRunEvent_Run{Run: run}}); err != nil {
					return err
				}
			} else if _, err := fmt.Fprintf(s.out.w, "run %s on %s\n", run.GetId(), args[0]); err != nil {
				return err
			}
			_, err = follow(c, s, agent, run.GetId(), eventWriter(s.out))
			return err
		},
	}
}

func agentAskCommand() *cli.Command {
	return &cli.Command{
		Name:  "ask",
		Usage: "ask a box's agent something and print only its answer",
		Description: "Runs the question as a task and waits for the run to end. Prints the agent's final answer;\n" +
			"a run that fails or is cancelled exits non-zero with the reason. --output json prints the ended run.",
		ArgsUsage: "BOX QUESTION...",
		Flags:     apiFlags(runFlags()...),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX QUESTION...", 2, -1)
			if err != nil {
				return err
			}
			s, agent, err := agentClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			run, err := startRun(c, agent, args)
			if err != nil {
				return err
			}
			stop := s.out.progress("asking " + args[0])
			end, err := follow(c, s, agent, run.GetId(), func(e *cbv1.WatchRunEvent) error {
				if r := e.GetRun(); r.GetState() == "waiting" {
					stop()
					s.out.note("a person holds the desktop of %s; the agent waits for it", args[0])
				}
				return nil
			})
			stop()
			if err != nil {
				return err
			}
			if end == nil {
				return cli.Exit(fmt.Sprintf("stopped waiting for %s", run.GetId()), exitError)
			}
			switch end.GetState() {
			case "succeeded":
			case "failed":
				return cli.Exit(fmt.Sprintf("run %s failed: %s", end.GetId(), end.GetError()), exitError)
			default:
				return cli.Exit(fmt.Sprintf("run %s %s", end.GetId(), end.GetState()), exitError)
			}
			return s.out.result(end, func(w io.Writer) error {
				answer := strings.TrimRight(end.GetResult(), "\n")
				_, err := fmt.Fprintln(w, answer)
				return err
			})
		},
	}
}
