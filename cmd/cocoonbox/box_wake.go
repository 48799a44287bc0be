package main

import (
	"context"
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxWakeCommand() *cli.Command {
	return boxStateCommand("wake", "bring a hibernated box back (a running box stays as it is)", "waking",
		func(ctx context.Context, boxes cbv1.BoxServiceClient, box string) (*cbv1.Box, error) {
			return boxes.WakeBox(ctx, &cbv1.WakeBoxRequest{Box: box, RequestId: requestID()})
		})
}

// boxStateCommand is a command taking one BOX that changes its state with one BoxService call,
// showing progress while it runs, and prints the box after.
func boxStateCommand(name, usage, doing string, call func(context.Context, cbv1.BoxServiceClient, string) (*cbv1.Box, error)) *cli.Command {
	return &cli.Command{
		Name:      name,
		Usage:     usage,
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
			stop := s.out.progress(doing + " " + args[0])
			b, err := call(c.Context, boxes, args[0])
			stop()
			if err != nil {
				return apiError(err)
			}
			return s.out.result(b, func(w io.Writer) error { return boxLine(w, b) })
		},
	}
}
