package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxForkCommand() *cli.Command {
	return &cli.Command{
		Name:  "fork",
		Usage: "copy a box with its memory into new boxes that go on from now",
		Description: "Each fork has the box's disk and memory at the moment of the copy: the same open windows\n" +
			"and running processes, with a machine ID of its own. The box is paused only for the copy.\n" +
			"Forks are yours, count toward your quota and name their parent (box show, box ls --tree).",
		ArgsUsage: "BOX",
		Flags: apiFlags(
			&cli.IntFlag{Name: "count", Value: 1, Usage: "how many forks (1 to 8)"},
			&cli.StringFlag{Name: "name", Usage: "name the forks `PREFIX`-1, PREFIX-2, … (default: the box's name followed by -fork)"},
		),
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
			stop := s.out.progress(fmt.Sprintf("forking %s %d way(s)", args[0], c.Int("count")))
			resp, err := boxes.ForkBox(c.Context, &cbv1.ForkBoxRequest{Box: args[0], Count: int32(c.Int("count")), Name: c.String("name"), RequestId: requestID()})
			stop()
			if err != nil {
				return apiError(err)
			}
			return s.out.result(resp, func(w io.Writer) error {
				for _, b := range resp.GetBoxes() {
					if err := boxLine(w, b); err != nil {
						return err
					}
				}
				_, err := fmt.Fprintf(w, "%s was paused %d ms for the copy\n", args[0], resp.GetPausedMs())
				return err
			})
		},
	}
}
