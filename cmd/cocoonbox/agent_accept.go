package main

import (
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func agentAcceptCommand() *cli.Command {
	return &cli.Command{
		Name:      "accept",
		Usage:     "give a box the state of its best-of-N run's pick, and delete the forks",
		ArgsUsage: "ATTEMPTS",
		Flags:     apiFlags(&cli.IntFlag{Name: "choose", Usage: "accept attempt `N` instead of the judge's pick"}),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "ATTEMPTS", 1, 1)
			if err != nil {
				return err
			}
			if c.Int("choose") < 0 {
				return usageError("--choose must be an attempt's number")
			}
			s, agent, err := agentClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			stop := s.out.progress("accepting " + args[0])
			att, err := agent.AcceptAttempts(c.Context, &cbv1.AcceptAttemptsRequest{Id: args[0], Choice: int32(c.Int("choose"))})
			stop()
			if err != nil {
				return apiError(err)
			}
			return s.out.result(att, func(w io.Writer) error { return writeAttempts(w, att) })
		},
	}
}
