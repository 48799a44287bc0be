package main

import (
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func agentDiscardCommand() *cli.Command {
	return &cli.Command{
		Name:      "discard",
		Usage:     "delete the forks of a best-of-N run, leaving its box as it was",
		ArgsUsage: "ATTEMPTS",
		Flags:     apiFlags(),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "ATTEMPTS", 1, 1)
			if err != nil {
				return err
			}
			s, agent, err := agentClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			att, err := agent.DiscardAttempts(c.Context, &cbv1.DiscardAttemptsRequest{Id: args[0]})
			if err != nil {
				return apiError(err)
			}
			return s.out.result(att, func(w io.Writer) error { return writeAttempts(w, att) })
		},
	}
}
