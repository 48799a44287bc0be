package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// adminNodesCommand is `cocoonbox admin nodes`: the engine nodes with their load.
func adminNodesCommand() *cli.Command {
	return &cli.Command{
		Name:  "nodes",
		Usage: "list the engine nodes: state, boxes, memory and warm pools, as their workers last reported",
		Description: "Each node's worker (serve worker --node ID) reports it every 10 s; a node silent for\n" +
			"node_dead_after (1 min by default) is lost. MEMORY is what its boxes' sizes take of\n" +
			"what the engine admits; WARM its ready boxes per template/size/net.",
		Flags: apiFlags(),
		Action: func(c *cli.Context) error {
			if _, err := positional(c, "", 0, 0); err != nil {
				return err
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			resp, err := boxes.ListNodes(c.Context, &cbv1.ListNodesRequest{})
			if err != nil {
				return apiError(err)
			}
			return listResult(s.out, resp.GetNodes(), func(w io.Writer) error { return writeNodes(w, resp.GetNodes(), s.out.now()) })
		},
	}
}

// writeNodes is the node table of admin nodes, each heartbeat's age as of now.
func writeNodes(w io.Writer, nodes []*cbv1.Node, now time.Time) error {
	if len(nodes) == 0 {
		_, err := fmt.Fprintln(w, "No engine nodes: a worker started with --node registers its engine.")
		return err
	}
	tw := table(w)
	row(tw, "ID", "STATE", "BOXES", "MEMORY", "WARM", "HEARTBEAT", "URL")
	for _, n := range nodes {
		boxes := fmt.Sprintf("%d (%d asleep)", n.GetBoxes(), n.GetHibernated())
		if n.GetMaxBoxes() > 0 {
			boxes = fmt.Sprintf("%d/%d (%d asleep)", n.GetBoxes(), n.GetMaxBoxes(), n.GetHibernated())
		}
		memory := "-"
		if n.GetMemoryMib() > 0 {
			memory = fmt.Sprintf("%d/%d MiB", n.GetCommittedMib(), n.GetMemoryMib())
		}
		var warm []string
		for _, k := range slices.Sorted(maps.Keys(n.GetWarm())) {
			warm = append(warm, fmt.Sprintf("%s=%d", k, n.GetWarm()[k]))
		}
		if len(warm) == 0 {
			warm = []string{"-"}
		}
		age := now.Sub(n.GetHeartbeatAt().AsTime()).Round(time.Second)
		row(tw, n.GetId(), n.GetState(), boxes, memory, strings.Join(warm, " "), age.String()+" ago", n.GetUrl())
	}
	return tw.Flush()
}
