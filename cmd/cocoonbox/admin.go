package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func adminCommand() *cli.Command {
	return &cli.Command{
		Name:        "admin",
		Usage:       "operate the deployment: warm pools, nodes and users (an admin user's token), the keyring, backups (on a host)",
		Subcommands: []*cli.Command{adminPoolsCommand(), adminNodesCommand(), adminDrainCommand(), adminUserCommand(), adminBudgetCommand(), adminKeyringCommand(), adminBackupCommand(), adminRestoreCommand()},
	}
}

func adminPoolsCommand() *cli.Command {
	return &cli.Command{
		Name:  "pools",
		Usage: "show or set the engine's warm pools: boxes booted ahead of creates",
		Description: "Without --set, lists each pool's target and the boxes ready and starting. --set\n" +
			"TEMPLATE/SIZE=N sets one pool's target (0 drains it) and keeps the others; a create of that\n" +
			"template and size then takes a ready box instead of booting one. `cocoonbox dev` sets its\n" +
			"config's pools again at its next start.\n\n" +
			"   cocoonbox admin pools --set desktop/small=3 --set desktop/medium=1",
		Flags: apiFlags(
			&cli.StringSliceFlag{Name: "set", Usage: "TEMPLATE/SIZE=N: keep N ready boxes of that template and size (repeatable)"},
			&cli.StringFlag{Name: "net", Value: "none", Usage: "the network lane of the pools --set names: none or egress (boxes with a network)"},
		),
		Action: func(c *cli.Context) error {
			if _, err := positional(c, "[--set TEMPLATE/SIZE=N]...", 0, 0); err != nil {
				return err
			}
			changes, err := parsePoolSets(c.StringSlice("set"), c.String("net"))
			if err != nil {
				return err
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			resp, err := boxes.ListPools(c.Context, &cbv1.ListPoolsRequest{})
			if err != nil {
				return apiError(err)
			}
			if len(changes) > 0 {
				if resp, err = boxes.SetPools(c.Context, &cbv1.SetPoolsRequest{Pools: mergePools(resp.GetPools(), changes)}); err != nil {
					return apiError(err)
				}
			}
			return listResult(s.out, resp.GetPools(), func(w io.Writer) error { return writePools(w, resp.GetPools()) })
		},
	}
}

// parsePoolSets reads --set values, TEMPLATE/SIZE=N, into pools of lane net.
func parsePoolSets(sets []string, net string) ([]*cbv1.WarmPool, error) {
	if net != "none" && net != "egress" {
		return nil, usageError("admin pools: --net must be none or egress, got %q", net)
	}
	var out []*cbv1.WarmPool
	for _, v := range sets {
		key, n, ok := strings.Cut(v, "=")
		template, size, ok2 := strings.Cut(key, "/")
		count, err := strconv.Atoi(n)
		if !ok || !ok2 || template == "" || size == "" || err != nil || count < 0 {
			return nil, usageError("admin pools: --set wants TEMPLATE/SIZE=N with N 0 or more, like desktop/small=2; got %q", v)
		}
		out = append(out, &cbv1.WarmPool{Template: template, Size: size, Net: net, Target: int32(count)})
	}
	return out, nil
}

// mergePools is the pools after changes: each change replaces the pool of its key or adds one,
// and a target of 0 drops it.
func mergePools(have, changes []*cbv1.WarmPool) []*cbv1.WarmPool {
	key := func(p *cbv1.WarmPool) string { return p.GetTemplate() + "/" + p.GetSize() + "/" + p.GetNet() }
	set := map[string]*cbv1.WarmPool{}
	var order []string
	for _, p := range append(append([]*cbv1.WarmPool{}, have...), changes...) {
		k := key(p)
		if _, ok := set[k]; !ok {
			order = append(order, k)
		}
		set[k] = &cbv1.WarmPool{Template: p.GetTemplate(), Size: p.GetSize(), Net: p.GetNet(), Target: p.GetTarget()}
	}
	var out []*cbv1.WarmPool
	for _, k := range order {
		if set[k].GetTarget() > 0 {
			out = append(out, set[k])
		}
	}
	return out
}

func writePools(w io.Writer, pools []*cbv1.WarmPool) error {
	if len(pools) == 0 {
		_, err := fmt.Fprintln(w, "No warm pools: every create boots its box.")
		return err
	}
	tw := table(w)
	row(tw, "TEMPLATE", "SIZE", "NET", "TARGET", "READY", "STARTING")
	for _, p := range pools {
		row(tw, p.GetTemplate(), p.GetSize(), p.GetNet(), fmt.Sprint(p.GetTarget()), fmt.Sprint(p.GetReady()), fmt.Sprint(p.GetStarting()))
	}
	return tw.Flush()
}
