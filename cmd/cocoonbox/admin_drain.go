package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// adminDrainCommand is `cocoonbox admin drain NODE`: no new box is placed on the node.
func adminDrainCommand() *cli.Command {
	return &cli.Command{
		Name:      "drain",
		Usage:     "stop placing new boxes on an engine node (--undo: place them there again)",
		ArgsUsage: "NODE",
		Description: "Marks the node draining: a new box's claim goes to another node, and its heartbeat keeps\n" +
			"it draining until --undo. The boxes already on it stay there (moving them to other nodes\n" +
			"is not built yet). `cocoonbox admin nodes` shows each node's state and boxes.",
		Flags: apiFlags(&cli.BoolFlag{Name: "undo", Usage: "make a draining node active again"}),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "NODE", 1, 1)
			if err != nil {
				return err
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			n, err := boxes.DrainNode(c.Context, &cbv1.DrainNodeRequest{Node: args[0], Undo: c.Bool("undo")})
			if err != nil {
				return apiError(err)
			}
			return s.out.result(n, func(w io.Writer) error {
				var err error
				if c.Bool("undo") {
					_, err = fmt.Fprintf(w, "node %s is %s: new boxes may be placed on it again\n", n.GetId(), n.GetState())
				} else {
					_, err = fmt.Fprintf(w, "node %s is %s: no new box is placed on it; its %d boxes stay on it\n", n.GetId(), n.GetState(), n.GetBoxes())
				}
				return err
			})
		},
	}
}
