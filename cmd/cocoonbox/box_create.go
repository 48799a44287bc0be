package main

import (
	"cmp"
	"context"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/loomhand/cocoonbox"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxCreateCommand() *cli.Command {
	return &cli.Command{
		Name:      "create",
		Usage:     "create a box and wait until it runs",
		ArgsUsage: "[NAME]",
		Flags: apiFlags(
			&cli.StringFlag{Name: "name", Usage: "box name, unique among your boxes (or give it as the argument)"},
			&cli.StringFlag{Name: "size", Value: "small", Usage: "small, medium, large, xlarge or 2xlarge"},
			&cli.StringFlag{Name: "request-id", Usage: "box ID to create (bx_ and 16 hex digits): a retried create returns the same box (default: a new one, which a resend after a lost answer keeps)"},
			&cli.StringFlag{Name: "network", Usage: "egress policy for the box's life: none, internet (all but the host, other boxes, private and link-local ranges) or allow (only --allow); default: the server's"},
			&cli.StringSliceFlag{Name: "allow", Usage: "with --network allow, a destination the box may reach: IPv4 CIDR or CIDR:port (repeatable)"},
		),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "--name NAME [--size SIZE]", 0, 1)
			if err != nil {
				return err
			}
			name := c.String("name")
			if len(args) == 1 {
				if name != "" && name != args[0] {
					return usageError("box create: give the name once, as --name or as the argument")
				}
				name = args[0]
			}
			if name == "" {
				return usageError("box create: --name is required")
			}
			network, allow := c.String("network"), c.StringSlice("allow")
			if len(allow) > 0 && network == "" {
				network = "allow" // --allow alone means what it says
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			stop := s.out.progress("creating box " + name)
			began := time.Now()
			quiet := sayWaiting(c.Context, s.out, boxes, name)
			b, err := boxes.CreateBox(c.Context, &cbv1.CreateBoxRequest{Name: name, Size: c.String("size"), RequestId: cmp.Or(c.String("request-id"), string(cocoonbox.NewBoxID())),
				Network: network, NetworkAllow: allow})
			quiet()
			stop()
			if err != nil {
				return apiError(err)
			}
			took := time.Since(began).Round(10 * time.Millisecond)
			switch b.GetStart() {
			case "warm":
				s.out.note("took a warm box: %s", took)
			case "cold":
				s.out.note("booted cold (no warm box of this template and size ready): %s", took)
			}
			return s.out.result(b, func(w io.Writer) error { return boxLine(w, b) })
		},
	}
}

// waitingEvery is how often a create in flight asks what its box waits for (tests shorten it).
var waitingEvery = 2 * time.Second

// sayWaiting notes on stderr what the box being created waits for (the engine's reason, tried
// again), each time it changes, until the returned func is called.
func sayWaiting(ctx context.Context, out *printer, boxes cbv1.BoxServiceClient, box string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(waitingEvery)
		defer t.Stop()
		said := ""
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			b, err := boxes.GetBox(ctx, &cbv1.GetBoxRequest{Box: box})
			if w := b.GetWaiting(); err == nil && w != said && ctx.Err() == nil {
				if w != "" {
					out.note("waiting: %s", w)
				}
				said = w
			}
		}
	}()
	return func() { cancel(); <-done }
}
