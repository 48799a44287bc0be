package main

import (
	"context"
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// box snapshot, box snapshots and box restore: a box's disk in object storage and back.

func boxSnapshotCommand() *cli.Command {
	return &cli.Command{
		Name:      "snapshot",
		Usage:     "store the box's disk in object storage and print the verified snapshot",
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
			stop := s.out.progress("snapshotting " + args[0])
			snap, err := boxes.SnapshotBox(c.Context, &cbv1.SnapshotBoxRequest{Box: args[0], RequestId: requestID()})
			stop()
			if err != nil {
				return apiError(err)
			}
			return s.out.result(snap, func(w io.Writer) error { return snapshotLine(w, snap) })
		},
	}
}

func boxSnapshotsCommand() *cli.Command {
	return &cli.Command{
		Name:      "snapshots",
		Usage:     "list a box's snapshots, newest first",
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
			resp, err := boxes.ListSnapshots(c.Context, &cbv1.ListSnapshotsRequest{Box: args[0]})
			if err != nil {
				return apiError(err)
			}
			return listResult(s.out, resp.GetSnapshots(), func(w io.Writer) error { return writeSnapshots(w, resp.GetSnapshots()) })
		},
	}
}

func boxRecreateCommand() *cli.Command {
	cmd := boxStateCommand("recreate", "start a lost box again from its template, empty", "recreating",
		func(ctx context.Context, boxes cbv1.BoxServiceClient, box string) (*cbv1.Box, error) {
			return boxes.RecreateBox(ctx, &cbv1.RecreateBoxRequest{Box: box})
		})
	cmd.Description = "A box whose sandbox was lost (its node died) comes back from its newest snapshot on its next\n" +
		"wake. One that had no snapshot is failed, lost, and stays so until you choose this: a new\n" +
		"sandbox from the template, with none of what the box had. Needs the admin role."
	return cmd
}

func boxRestoreCommand() *cli.Command {
	return &cli.Command{
		Name:      "restore",
		Usage:     "replace the box's state with a snapshot (default: the newest complete one)",
		ArgsUsage: "BOX",
		Flags:     apiFlags(&cli.StringFlag{Name: "snapshot", Usage: "snapshot ID to restore"}),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX [--snapshot ID]", 1, 1)
			if err != nil {
				return err
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			stop := s.out.progress("restoring " + args[0])
			b, err := boxes.RestoreBox(c.Context, &cbv1.RestoreBoxRequest{Box: args[0], SnapshotId: c.String("snapshot"), RequestId: requestID()})
			stop()
			if err != nil {
				return apiError(err)
			}
			return s.out.result(b, func(w io.Writer) error { return boxLine(w, b) })
		},
	}
}
