package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
	"github.com/loomhand/cocoonbox/workflows"
)

// adminDrainCommand is `cocoonbox admin drain NODE`: no new box is placed on the node, and its
// boxes are moved to others.
func adminDrainCommand() *cli.Command {
	return &cli.Command{
		Name:      "drain",
		Usage:     "move every box off an engine node and place no new one on it (--undo: place them there again)",
		ArgsUsage: "NODE",
		Description: "Marks the node draining: a new box's claim goes to another node, and its heartbeat keeps\n" +
			"it draining until --undo. Its boxes are moved to other nodes, one at a time unless\n" +
			"--parallel says more: a running box is snapshotted and restored elsewhere (its disk moves,\n" +
			"its memory and processes do not, and its events say so); a hibernated box moves on its\n" +
			"next wake. Draining again retries boxes that failed to move. --undo stops a drain under\n" +
			"way. `cocoonbox admin nodes` shows each node's state and boxes.",
		Flags: apiFlags(
			&cli.BoolFlag{Name: "undo", Usage: "make a draining node active again"},
			&cli.BoolFlag{Name: "wait", Usage: "wait until the running boxes have moved, and say what became of each (each takes a snapshot and a restore: raise --timeout for many)"},
			&cli.IntFlag{Name: "parallel", Value: 1, Usage: "move up to `N` boxes at once (1 to 16; a drain already under way keeps its own)"},
		),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "NODE", 1, 1)
			if err != nil {
				return err
			}
			parallel := c.Int("parallel")
			if parallel < 1 || parallel > workflows.MaxDrainParallel {
				return usageError("admin drain: --parallel must be 1 to %d boxes moved at once, got %d", workflows.MaxDrainParallel, parallel)
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			n, err := boxes.DrainNode(c.Context, &cbv1.DrainNodeRequest{Node: args[0], Undo: c.Bool("undo"), Wait: c.Bool("wait"), Parallel: int32(parallel)})
			if err != nil {
				return apiError(err)
			}
			return s.out.result(n, func(w io.Writer) error {
				var err error
				switch d := n.GetDrain(); {
				case c.Bool("undo"):
					_, err = fmt.Fprintf(w, "node %s is %s: new boxes may be placed on it again\n", n.GetId(), n.GetState())
				case d == nil:
					_, err = fmt.Fprintf(w, "node %s is %s: no new box is placed on it, and its %d boxes are being moved to other nodes (hibernated ones on their next wake)\n",
						n.GetId(), n.GetState(), n.GetBoxes())
				default:
					_, err = fmt.Fprintf(w, "node %s is %s: %d boxes moved to other nodes, %d move on their next wake, %d failed\n",
						n.GetId(), n.GetState(), len(d.GetMoved()), len(d.GetOnWake()), len(d.GetFailed()))
					for _, f := range d.GetFailed() {
						if err == nil {
							_, err = fmt.Fprintf(w, "  %s stays: %s\n", f.GetBox(), f.GetReason())
						}
					}
				}
				return err
			})
		},
	}
}
