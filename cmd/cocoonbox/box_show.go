package main

import (
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxShowCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Aliases:   []string{"get"},
		Usage:     "show a box's status",
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
			b, err := boxes.GetBox(c.Context, &cbv1.GetBoxRequest{Box: args[0]})
			if err != nil {
				return apiError(err)
			}
			return s.out.result(b, func(w io.Writer) error { return writeBox(w, b) })
		},
	}
}
