package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func agentWatchCommand() *cli.Command {
	return &cli.Command{
		Name:  "watch",
		Usage: "follow a run's steps until it ends",
		Description: "Prints the steps already taken, then each new one, one line per step with its tool calls\n" +
			"indented, and the run's final state. Ctrl-C stops following; the run goes on. With --output\n" +
			"json each line is one JSON event: {\"step\": …} or {\"run\": …}, the last being the ended run.",
		ArgsUsage: "RUN",
		Flags:     apiFlags(),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "RUN", 1, 1)
			if err != nil {
				return err
			}
			s, agent, err := agentClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			_, err = follow(c, s, agent, args[0], eventWriter(s.out))
			return err
		},
	}
}

// follow watches run until it ends, handing every event to handle, and returns the ended run.
// When the caller interrupts (Ctrl-C) it stops following, says the run goes on, and returns nil
// and no error: the run is not this command's to stop.
func follow(c *cli.Context, s *session, agent cbv1.AgentServiceClient, runID string, handle func(*cbv1.WatchRunEvent) error) (*cbv1.AgentRun, error) {
	interrupted := func() (*cbv1.AgentRun, error) {
		s.out.note("\nstopped following; the run continues; cocoonbox agent cancel %s stops it", runID)
		return nil, nil
	}
	stream, err := agent.WatchRun(c.Context, &cbv1.WatchRunRequest{RunId: runID})
	if err != nil {
		if c.Context.Err() != nil {
			return interrupted()
		}
		return nil, apiError(err)
	}
	var last *cbv1.AgentRun
	for {
		e, err := stream.Recv()
		switch {
		case err == nil:
		case c.Context.Err() != nil:
			return interrupted()
		case errors.Is(err, io.EOF):
			if last == nil || !runEnded(last) {
				return nil, cli.Exit(fmt.Sprintf("the server stopped the watch of %s before the run ended", runID), exitUnavailable)
			}
			return last, nil
		case err != nil:
			return nil, apiError(err)
		}
		if r := e.GetRun(); r != nil {
			last = r
		}
		if err := handle(e); err != nil {
			return nil, err
		}
	}
}

// eventWriter prints watch events: one compact JSON object a line for scripts, else steps and
// state changes for people.
func eventWriter(p *printer) func(*cbv1.WatchRunEvent) error {
	if p.json {
		return func(e *cbv1.WatchRunEvent) error { return writeJSONLine(p.w, e) }
	}
	var state string
	streaming := false // the model's text of a step is being printed as it comes
	return func(e *cbv1.WatchRunEvent) error {
		if t := e.GetText(); t != nil {
			if !streaming {
				streaming = true
				if _, err := fmt.Fprintf(p.w, "step %d  ", t.GetStep()); err != nil {
					return err
				}
			}
			_, err := io.WriteString(p.w, oneLineStream(t.GetText()))
			return err
		}
		if streaming {
			// The step's own line follows: end the streamed one.
			streaming = false
			if _, err := fmt.Fprintln(p.w, "…"); err != nil {
				return err
			}
		}
		if st := e.GetStep(); st != nil {
			return writeStep(p.w, st)
		}
		r := e.GetRun()
		prev := state
		state = r.GetState()
		switch {
		case runEnded(r):
			return writeRunEnd(p.w, r)
		case state == prev:
			return nil
		case state == "waiting":
			_, err := fmt.Fprintln(p.w, "waiting: a person holds the desktop; the agent goes on when it is handed back")
			return err
		case state == "waiting_for_user":
			_, err := fmt.Fprintf(p.w, "the agent asks: %s\n    answer with: cocoonbox agent say %s ANSWER\n", r.GetQuestion(), r.GetId())
			return err
		case prev != "":
			_, err := fmt.Fprintf(p.w, "%s again\n", state)
			return err
		}
		return nil
	}
}

// oneLineStream is streamed model text on the one line it is printed on as it comes: line
// breaks become spaces, and control characters (a model's text is untrusted) are dropped.
func oneLineStream(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return ' '
		case r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return -1
		}
		return r
	}, s)
}
