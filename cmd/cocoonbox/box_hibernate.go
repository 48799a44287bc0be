package main

import (
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxHibernateCommand() *cli.Command {
	return &cli.Command{
		Name:      "hibernate",
		Usage:     "free a box's CPU and memory, keeping its state",
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
			stop := s.out.progress("hibernating " + args[0])
			b, err := boxes.HibernateBox(c.Context, &cbv1.HibernateBoxRequest{Box: args[0]})
			stop()
			if err != nil {
				return apiError(err)
			}
			return s.out.result(b, func(w io.Writer) error { return boxLine(w, b) })
		},
	}
}
