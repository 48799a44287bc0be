package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// box share, box unshare and box shares: who else may use a box, and how.

func boxShareCommand() *cli.Command {
	return &cli.Command{
		Name:      "share",
		Usage:     "give a user a role on a box, replacing any earlier share",
		ArgsUsage: "BOX USER",
		Description: "Roles: viewer watches the box; driver may also exec, copy files, wake, hibernate, snapshot,\n" +
			"restore and take control; admin may also share and delete. USER is a user name or ID.",
		Flags: apiFlags(
			&cli.StringFlag{Name: "role", Usage: "viewer, driver or admin (required)"},
			&cli.DurationFlag{Name: "expires", Usage: "end the share after this long, e.g. 24h (default: until unshared)"},
		),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX USER --role viewer|driver|admin [--expires 24h]", 2, 2)
			if err != nil {
				return err
			}
			if c.String("role") == "" {
				return usageError("box share: --role is required: viewer, driver or admin")
			}
			req := &cbv1.ShareBoxRequest{Box: args[0], User: args[1], Role: c.String("role")}
			d := c.Duration("expires")
			if c.IsSet("expires") && d <= 0 {
				return usageError("box share: --expires must be positive, got %s", d)
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			if d > 0 {
				req.ExpiresAt = timestamppb.New(s.out.now().Add(d))
			}
			sh, err := boxes.ShareBox(c.Context, req)
			if err != nil {
				return apiError(err)
			}
			return s.out.result(sh, func(w io.Writer) error {
				expires := "until unshared"
				if sh.GetExpiresAt() != nil {
					expires = "until " + when(sh.GetExpiresAt())
				}
				_, err := fmt.Fprintf(w, "%s is %s of box %s %s\n", sh.GetUserName(), sh.GetRole(), sh.GetBoxId(), expires)
				return err
			})
		},
	}
}

func boxUnshareCommand() *cli.Command {
	return &cli.Command{
		Name:      "unshare",
		Usage:     "take a user's share of a box away",
		ArgsUsage: "BOX USER",
		Flags:     apiFlags(),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX USER", 2, 2)
			if err != nil {
				return err
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			resp, err := boxes.UnshareBox(c.Context, &cbv1.UnshareBoxRequest{Box: args[0], User: args[1]})
			if err != nil {
				return apiError(err)
			}
			return s.out.result(resp, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "%s no longer shares box %s\n", args[1], args[0])
				return err
			})
		},
	}
}

func boxSharesCommand() *cli.Command {
	return &cli.Command{
		Name:      "shares",
		Usage:     "list who a box is shared with",
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
			resp, err := boxes.ListShares(c.Context, &cbv1.ListSharesRequest{Box: args[0]})
			if err != nil {
				return apiError(err)
			}
			return listResult(s.out, resp.GetShares(), func(w io.Writer) error { return writeShares(w, resp.GetShares()) })
		},
	}
}
