package main

import (
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxWakeCommand() *cli.Command {
	return &cli.Command{
		Name:      "wake",
		Usage:     "bring a hibernated box back (a running box stays as it is)",
		ArgsUsage: "BOX",
		Flags:     apiFlags(),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX", 1, 1)
			if err != nil {
				return err
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			stop := s.out.progress("waking " + args[0])
			b, err := boxes.WakeBox(c.Context, &cbv1.WakeBoxRequest{Box: args[0]})
			stop()
			if err != nil {
				return apiError(err)
			}
			return s.out.result(b, func(w io.Writer) error { return boxLine(w, b) })
		},
	}
}
