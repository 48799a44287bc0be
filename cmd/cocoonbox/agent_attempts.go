package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// attemptsPoll is how often agent run --attempts asks how its attempts are doing.
const attemptsPoll = time.Second

// runAttempts is agent run --attempts: it starts the best-of-N run, prints each attempt's end as
// it comes and the judge's pick, and accepts the pick with --accept.
func runAttempts(c *cli.Context, s *session, agent cbv1.AgentServiceClient, args []string) error {
	n := c.Int("attempts")
	if n < 2 || n > 8 {
		return usageError("--attempts must be from 2 to 8")
	}
	stop := s.out.progress(fmt.Sprintf("forking %s %d ways", args[0], n))
	att, err := agent.StartAttempts(c.Context, &cbv1.StartAttemptsRequest{
		Box: args[0], Task: strings.Join(args[1:], " "), Attempts: int32(n), Model: c.String("model"), MaxSteps: int32(c.Int("max-steps")),
		RequestId: requestID(),
	})
	stop()
	if err != nil {
		return apiError(err)
	}
	if !s.out.json {
		fmt.Fprintf(s.out.w, "attempts %s on %s: %d forks\n", att.GetId(), args[0], len(att.GetAttempts()))
	}
	said := map[int32]string{}
	for att.GetState() == "running" || att.GetState() == "judging" {
		for _, a := range att.GetAttempts() {
			if st := a.GetState(); st != said[a.GetNumber()] && st != "running" && st != "" && !s.out.json {
				fmt.Fprintf(s.out.w, "attempt %d (%s) %s\n", a.GetNumber(), a.GetBoxId(), st)
			}
			said[a.GetNumber()] = a.GetState()
		}
		select {
		case <-c.Context.Done():
			return cli.Exit(fmt.Sprintf("stopped following %s; it goes on (agent attempts %s)", att.GetId(), att.GetId()), exitError)
		case <-time.After(attemptsPoll):
		}
		if att, err = agent.GetAttempts(c.Context, &cbv1.GetAttemptsRequest{Id: att.GetId()}); err != nil {
			return apiError(err)
		}
	}
	if att.GetState() == "judged" && c.Bool("accept") {
		stop := s.out.progress("giving " + args[0] + " the state of the judge's pick")
		att, err = agent.AcceptAttempts(c.Context, &cbv1.AcceptAttemptsRequest{Id: att.GetId()})
		stop()
		if err != nil {
			return apiError(err)
		}
	}
	if err := s.out.result(att, func(w io.Writer) error { return writeAttempts(w, att) }); err != nil {
		return err
	}
	switch att.GetState() {
	case "judged":
		if !s.out.json {
			s.out.note("accept it with: cocoonbox agent accept %s (--choose N for another); or: cocoonbox agent discard %s", att.GetId(), att.GetId())
		}
	case "failed":
		return cli.Exit("the attempts failed: "+att.GetError(), exitError)
	}
	return nil
}

// writeAttempts prints a best-of-N run: each attempt and the judge's pick.
func writeAttempts(w io.Writer, att *cbv1.Attempts) error {
	tw := table(w)
	row(tw, "ATTEMPT", "BOX", "RUN", "STATE", "SAID")
	for _, a := range att.GetAttempts() {
		mark := fmt.Sprint(a.GetNumber())
		if a.GetNumber() == att.GetWinner() {
			mark += " *"
		}
		row(tw, mark, a.GetBoxId(), a.GetRunId(), a.GetState(), oneLine(a.GetResult(), 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	if att.GetWinner() > 0 {
		_, err = fmt.Fprintf(w, "the judge picked attempt %d: %s\n", att.GetWinner(), att.GetReason())
	}
	if err == nil && att.GetChosen() > 0 {
		_, err = fmt.Fprintf(w, "attempt %d is %s\n", att.GetChosen(), map[bool]string{true: "the box's state now", false: att.GetState()}[att.GetState() == "accepted"])
	}
	if err == nil && att.GetError() != "" {
		_, err = fmt.Fprintf(w, "error: %s\n", att.GetError())
	}
	return err
}
