package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func agentLsCommand() *cli.Command {
	return &cli.Command{
		Name:      "ls",
		Aliases:   []string{"list"},
		Usage:     "list a box's runs, newest first",
		ArgsUsage: "BOX",
		Flags:     apiFlags(),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX", 1, 1)
			if err != nil {
				return err
			}
			s, agent, err := agentClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			resp, err := agent.ListRuns(c.Context, &cbv1.ListRunsRequest{Box: args[0]})
			if err != nil {
				return apiError(err)
			}
			return listResult(s.out, resp.GetRuns(), func(w io.Writer) error { return writeRuns(w, resp.GetRuns()) })
		},
	}
}

func agentShowCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Aliases:   []string{"get"},
		Usage:     "show a run with its steps",
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
			run, err := agent.GetRun(c.Context, &cbv1.GetRunRequest{RunId: args[0]})
			if err != nil {
				return apiError(err)
			}
			return s.out.result(run, func(w io.Writer) error { return writeRun(w, run) })
		},
	}
}

func agentSayCommand() *cli.Command {
	return &cli.Command{
		Name:      "say",
		Usage:     "tell a running agent something; its next step reads it",
		ArgsUsage: "RUN TEXT...",
		Flags:     apiFlags(),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "RUN TEXT...", 2, -1)
			if err != nil {
				return err
			}
			s, agent, err := agentClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			resp, err := agent.SendMessage(c.Context, &cbv1.SendMessageRequest{RunId: args[0], Text: strings.Join(args[1:], " ")})
			if err != nil {
				return apiError(err)
			}
			return s.out.result(resp, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "sent to %s\n", args[0])
				return err
			})
		},
	}
}

func agentCancelCommand() *cli.Command {
	return &cli.Command{
		Name:      "cancel",
		Usage:     "stop a run; its steps so far are kept",
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
			run, err := agent.CancelRun(c.Context, &cbv1.CancelRunRequest{RunId: args[0]})
			if err != nil {
				return apiError(err)
			}
			return s.out.result(run, func(w io.Writer) error {
				var err error
				if runEnded(run) {
					_, err = fmt.Fprintf(w, "%s already %s\n", run.GetId(), run.GetState())
				} else {
					_, err = fmt.Fprintf(w, "cancelling %s\n", run.GetId())
				}
				return err
			})
		},
	}
}
