package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxPolicyCommand() *cli.Command {
	return &cli.Command{
		Name:      "policy",
		Usage:     "show or change how a box behaves on its own: idle hibernate and snapshots",
		ArgsUsage: "BOX",
		Description: "Without flags, shows the box's policy. A change needs the admin role; what is not given\n" +
			"stays as it is.\n\n" +
			"   cocoonbox box policy mybox --idle 30m --snapshot-every 1h --keep 10\n" +
			"   cocoonbox box policy mybox --idle 0     (never hibernate by itself)",
		Flags: apiFlags(
			&cli.DurationFlag{Name: "idle", DefaultText: "unchanged", Usage: "how long the box runs with nothing happening before it hibernates (1m to 720h; 0: never by itself)"},
			&cli.BoolFlag{Name: "durable", DefaultText: "unchanged; new boxes are durable", Usage: "seal the box into a verified snapshot at every hibernate"},
			&cli.BoolFlag{Name: "no-durable", DefaultText: "unchanged", Usage: "hibernate without sealing: a node loss while it sleeps loses what it did since its last snapshot"},
			&cli.DurationFlag{Name: "snapshot-every", DefaultText: "unchanged", Usage: "seal a running box this long after its last snapshot when it was active (5m to 720h; 0: never by itself)"},
			&cli.IntFlag{Name: "keep", DefaultText: "unchanged", Usage: "how many complete snapshots to keep (1 to 1000; pinned ones besides)"},
		),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX [--idle D] [--snapshot-every D] [--durable | --no-durable] [--keep N]", 1, 1)
			if err != nil {
				return err
			}
			req := &cbv1.SetPolicyRequest{Box: args[0]}
			for _, f := range []struct {
				name string
				to   **int64
			}{{"idle", &req.IdleSeconds}, {"snapshot-every", &req.SnapshotEverySeconds}} {
				if !c.IsSet(f.name) {
					continue
				}
				d := c.Duration(f.name)
				if d%time.Second != 0 {
					return usageError("box policy: --%s must be whole seconds, got %s", f.name, d)
				}
				n := int64(d / time.Second)
				*f.to = &n
			}
			switch {
			case c.IsSet("durable") && c.IsSet("no-durable"):
				return usageError("box policy: give --durable or --no-durable, not both")
			case c.IsSet("durable"):
				v := c.Bool("durable")
				req.Durable = &v
			case c.IsSet("no-durable"):
				v := !c.Bool("no-durable")
				req.Durable = &v
			}
			if c.IsSet("keep") {
				n := int32(c.Int("keep"))
				req.KeepSnapshots = &n
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			var b *cbv1.Box
			if req.IdleSeconds == nil && req.Durable == nil && req.KeepSnapshots == nil && req.SnapshotEverySeconds == nil {
				b, err = boxes.GetBox(c.Context, &cbv1.GetBoxRequest{Box: args[0]})
			} else {
				b, err = boxes.SetPolicy(c.Context, req)
			}
			if err != nil {
				return apiError(err)
			}
			return s.out.result(b.GetPolicy(), func(w io.Writer) error {
				_, err := fmt.Fprintln(w, policyLine(b.GetPolicy()))
				return err
			})
		},
	}
}

// policyLine is a box's policy in one line, as box show and box policy print it.
func policyLine(p *cbv1.BoxPolicy) string {
	if p == nil {
		return ""
	}
	var parts []string
	if p.GetIdleSeconds() == 0 {
		parts = append(parts, "idle never")
	} else {
		parts = append(parts, "idle "+wholeDuration(p.GetIdleSeconds()))
	}
	if p.GetDurable() {
		parts = append(parts, "durable")
	} else {
		parts = append(parts, "not durable")
	}
	if n := p.GetSnapshotEverySeconds(); n > 0 {
		parts = append(parts, "snapshot every "+wholeDuration(n))
	}
	parts = append(parts, fmt.Sprintf("keep %d snapshots", p.GetKeepSnapshots()))
	return strings.Join(parts, ", ")
}

// wholeDuration is a number of seconds in the largest whole unit: 2h, 90m, 45s.
func wholeDuration(secs int64) string {
	switch {
	case secs%3600 == 0:
		return fmt.Sprintf("%dh", secs/3600)
	case secs%60 == 0:
		return fmt.Sprintf("%dm", secs/60)
	}
	return fmt.Sprintf("%ds", secs)
}
