package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// policyFlags are the policy fields box policy and policy default set; what is not given stays.
func policyFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "idle", DefaultText: "unchanged", Usage: "how long the box runs with nothing happening before it hibernates (1m to 720h; 0: never by itself)"},
		&cli.BoolFlag{Name: "durable", DefaultText: "unchanged; new boxes are durable", Usage: "seal the box into a verified snapshot at every hibernate"},
		&cli.BoolFlag{Name: "no-durable", DefaultText: "unchanged", Usage: "hibernate without sealing: a node loss while it sleeps loses what it did since its last snapshot"},
		&cli.DurationFlag{Name: "snapshot-every", DefaultText: "unchanged", Usage: "seal a running box this long after its last snapshot when it was active (5m to 720h; 0: never by itself)"},
		&cli.IntFlag{Name: "keep", DefaultText: "unchanged", Usage: "how many complete snapshots to keep (1 to 1000; pinned ones besides)"},
		&cli.DurationFlag{Name: "lease-idle", DefaultText: "unchanged", Usage: "how long the desktop's control lease outlives its holder's last control connection (30s to 24h)"},
		&cli.BoolFlag{Name: "record-runs", DefaultText: "unchanged; new boxes do not", Usage: "record the desktop of every agent run, for replay beside its steps"},
		&cli.BoolFlag{Name: "no-record-runs", DefaultText: "unchanged", Usage: "record only the runs started with --record"},
	}
}

// policyFields is what the policy flags set: nil where a flag is not given.
type policyFields struct {
	idle, snapshotEvery, leaseIdle *int64
	durable, recordRuns            *bool
	keep                           *int32
}

func (f policyFields) empty() bool {
	return f.idle == nil && f.snapshotEvery == nil && f.leaseIdle == nil && f.durable == nil && f.keep == nil && f.recordRuns == nil
}

// readPolicyFlags reads the policy flags of the command cmd names in its errors.
func readPolicyFlags(c *cli.Context, cmd string) (policyFields, error) {
	var f policyFields
	for _, d := range []struct {
		name string
		to   **int64
	}{{"idle", &f.idle}, {"snapshot-every", &f.snapshotEvery}, {"lease-idle", &f.leaseIdle}} {
		if !c.IsSet(d.name) {
			continue
		}
		v := c.Duration(d.name)
		if v%time.Second != 0 {
			return f, usageError("%s: --%s must be whole seconds, got %s", cmd, d.name, v)
		}
		n := int64(v / time.Second)
		*d.to = &n
	}
	for _, d := range []struct {
		name string
		to   **bool
	}{{"durable", &f.durable}, {"record-runs", &f.recordRuns}} {
		switch {
		case c.IsSet(d.name) && c.IsSet("no-"+d.name):
			return f, usageError("%s: give --%s or --no-%s, not both", cmd, d.name, d.name)
		case c.IsSet(d.name):
			v := c.Bool(d.name)
			*d.to = &v
		case c.IsSet("no-" + d.name):
			v := !c.Bool("no-" + d.name)
			*d.to = &v
		}
	}
	if c.IsSet("keep") {
		n := int32(c.Int("keep"))
		f.keep = &n
	}
	return f, nil
}

const policyArgs = "[--idle D] [--snapshot-every D] [--durable | --no-durable] [--keep N] [--lease-idle D] [--record-runs | --no-record-runs]"

func boxPolicyCommand() *cli.Command {
	return &cli.Command{
		Name:      "policy",
		Usage:     "show or change how a box behaves on its own: idle hibernate, snapshots, recording runs",
		ArgsUsage: "BOX",
		Description: "Without flags, shows the box's policy. A change needs the admin role; what is not given\n" +
			"stays as it is. `cocoonbox policy default` sets what your new boxes start with.\n\n" +
			"   cocoonbox box policy mybox --idle 30m --snapshot-every 1h --keep 10\n" +
			"   cocoonbox box policy mybox --idle 0     (never hibernate by itself)",
		Flags: apiFlags(policyFlags()...),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX "+policyArgs, 1, 1)
			if err != nil {
				return err
			}
			f, err := readPolicyFlags(c, "box policy")
			if err != nil {
				return err
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			var b *cbv1.Box
			if f.empty() {
				b, err = boxes.GetBox(c.Context, &cbv1.GetBoxRequest{Box: args[0]})
			} else {
				b, err = boxes.SetPolicy(c.Context, &cbv1.SetPolicyRequest{Box: args[0], IdleSeconds: f.idle, Durable: f.durable,
					KeepSnapshots: f.keep, SnapshotEverySeconds: f.snapshotEvery, LeaseIdleSeconds: f.leaseIdle, RecordRuns: f.recordRuns})
			}
			if err != nil {
				return apiError(err)
			}
			return printPolicy(s.out, b.GetPolicy())
		},
	}
}

// policyCommand holds the caller's defaults for the boxes they create.
func policyCommand() *cli.Command {
	return &cli.Command{
		Name:  "policy",
		Usage: "your defaults for the policy of the boxes you create",
		Subcommands: []*cli.Command{{
			Name:  "default",
			Usage: "show or change the policy your new boxes start with",
			Description: "Without flags, shows the policy a box you create now gets: the server's default with yours\n" +
				"over it. What is not given stays as it is; existing boxes keep their policy (box policy\n" +
				"changes one).\n\n" +
				"   cocoonbox policy default --idle 1h --snapshot-every 2h",
			Flags: apiFlags(policyFlags()...),
			Action: func(c *cli.Context) error {
				if _, err := positional(c, policyArgs, 0, 0); err != nil {
					return err
				}
				f, err := readPolicyFlags(c, "policy default")
				if err != nil {
					return err
				}
				s, boxes, err := boxClient(c)
				if err != nil {
					return err
				}
				defer s.Close()
				var p *cbv1.BoxPolicy
				if f.empty() {
					p, err = boxes.GetPolicyDefaults(c.Context, &cbv1.GetPolicyDefaultsRequest{})
				} else {
					p, err = boxes.SetPolicyDefaults(c.Context, &cbv1.SetPolicyDefaultsRequest{IdleSeconds: f.idle, Durable: f.durable,
						KeepSnapshots: f.keep, SnapshotEverySeconds: f.snapshotEvery, LeaseIdleSeconds: f.leaseIdle, RecordRuns: f.recordRuns})
				}
				if err != nil {
					return apiError(err)
				}
				return printPolicy(s.out, p)
			},
		}},
	}
}

func printPolicy(out *printer, p *cbv1.BoxPolicy) error {
	return out.result(p, func(w io.Writer) error {
		_, err := fmt.Fprintln(w, policyLine(p))
		return err
	})
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
	if n := p.GetLeaseIdleSeconds(); n > 0 {
		parts = append(parts, "lease idle "+wholeDuration(n))
	}
	parts = append(parts, fmt.Sprintf("keep %d snapshots", p.GetKeepSnapshots()))
	if p.GetRecordRuns() {
		parts = append(parts, "records every agent run")
	}
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
