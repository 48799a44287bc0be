package main

import (
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxNetworkCommand() *cli.Command {
	return &cli.Command{
		Name:      "network",
		Usage:     "change a box's egress policy at once: internet, or only what --allow lists",
		ArgsUsage: "BOX",
		Description: "Needs the admin role. Whether a box has a network at all is fixed at its create\n" +
			"(box create --network none); internet and allow-lists change into each other.",
		Flags: apiFlags(
			&cli.StringFlag{Name: "network", Usage: "internet or allow (implied by --allow)"},
			&cli.StringSliceFlag{Name: "allow", Usage: "a destination the box may reach: IPv4 CIDR or CIDR:port (repeatable)"},
		),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX --network internet | --allow DEST...", 1, 1)
			if err != nil {
				return err
			}
			network, allow := c.String("network"), c.StringSlice("allow")
			if len(allow) > 0 && network == "" {
				network = "allow"
			}
			if network == "" {
				return usageError("box network: give --network internet or --allow DEST")
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			b, err := boxes.SetBoxNetwork(c.Context, &cbv1.SetBoxNetworkRequest{Box: args[0], Network: network, NetworkAllow: allow})
			if err != nil {
				return apiError(err)
			}
			return s.out.result(b, func(w io.Writer) error { return writeBox(w, b) })
		},
	}
}
