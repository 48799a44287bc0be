package main

import (
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxLsCommand() *cli.Command {
	return &cli.Command{
		Name:    "ls",
		Aliases: []string{"list"},
		Usage:   "list your boxes and the boxes shared with you",
		Flags:   apiFlags(&cli.BoolFlag{Name: "tree", Usage: "show each fork under the box it was forked from"}),
		Action: func(c *cli.Context) error {
			if _, err := positional(c, "", 0, 0); err != nil {
				return err
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			resp, err := boxes.ListBoxes(c.Context, &cbv1.ListBoxesRequest{})
			if err != nil {
				return apiError(err)
			}
			write := writeBoxes
			if c.Bool("tree") {
				write = writeBoxTree
			}
			return listResult(s.out, resp.GetBoxes(), func(w io.Writer) error { return write(w, resp.GetBoxes()) })
		},
	}
}
