package main

import (
	"cmp"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func usageCommand() *cli.Command {
	return &cli.Command{
		Name:  "usage",
		Usage: "show what agent runs' model calls and your boxes used and cost",
		Description: "Sums the model calls of your agent runs, as the gateway reported them to the worker, by\n" +
			"user, box, run or model. The cost is at the prices the operator configured (agent.prices);\n" +
			"a model without one costs 0. By box or user it also shows the hours the boxes ran since\n" +
			"then and what their snapshots store now. An admin sees every user's with --all.",
		Flags: apiFlags(
			&cli.StringFlag{Name: "by", Value: "run", Usage: "group by `user`, box, run or model"},
			&cli.StringFlag{Name: "since", Value: "30d", Usage: "count calls of the last `AGE` (7d, 12h, 90m) or since a date (2026-12-01)"},
			&cli.BoolFlag{Name: "all", Usage: "every user's calls (admin)"},
		),
		Action: func(c *cli.Context) error {
			if _, err := positional(c, "", 0, 0); err != nil {
				return err
			}
			since, err := parseSince(c.String("since"), time.Now())
			if err != nil {
				return usageError("--since: %v", err)
			}
			s, err := open(c)
			if err != nil {
				return err
			}
			defer s.Close()
			resp, err := cbv1.NewAccountServiceClient(s.conn).GetUsage(c.Context, &cbv1.GetUsageRequest{
				By: c.String("by"), Since: timestamppb.New(since), AllUsers: c.Bool("all"),
			})
			if err != nil {
				return apiError(err)
			}
			return s.out.result(resp, func(w io.Writer) error { return writeUsage(w, c.String("by"), resp) })
		},
	}
}

// parseSince reads an age before now (7d, 12h, 90m) or a date (2026-12-01, UTC).
func parseSince(v string, now time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return time.Time{}, fmt.Errorf("want an age such as 7d, 12h or 90m, or a date such as 2026-12-01, got %q", v)
		}
		return now.Add(-time.Duration(n) * 24 * time.Hour), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("want an age such as 7d, 12h or 90m, or a date such as 2026-12-01, got %q", v)
}

func writeUsage(w io.Writer, by string, resp *cbv1.GetUsageResponse) error {
	tw := table(w)
	row(tw, strings.ToUpper(by), "MODEL", "CALLS", "INPUT", "CACHED", "OUTPUT", "COST (USD)")
	var calls, in, cached, out int64
	var cost float64
	for _, r := range resp.GetRows() {
		key := r.GetKey()
		if r.GetName() != "" {
			key = r.GetName()
		}
		row(tw, key, r.GetModel(), count(r.GetCalls()), count(r.GetInputTokens()), count(r.GetCachedTokens()),
			count(r.GetOutputTokens()), fmt.Sprintf("%.4f", r.GetCostUsd()))
		calls, in, cached, out, cost = calls+r.GetCalls(), in+r.GetInputTokens(), cached+r.GetCachedTokens(), out+r.GetOutputTokens(), cost+r.GetCostUsd()
	}
	row(tw, "total", "", count(calls), count(in), count(cached), count(out), fmt.Sprintf("%.4f", cost))
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeBoxUsage(w, by, resp.GetBoxes()); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "since %s\n", when(resp.GetSince()))
	return err
}

// writeBoxUsage writes the boxes' running hours and stored snapshots after a blank line, a row
// a box (by box) or a user (by user); other groupings leave them out.
func writeBoxUsage(w io.Writer, by string, boxes []*cbv1.BoxUsage) error {
	if len(boxes) == 0 || by != "box" && by != "user" {
		return nil
	}
	fmt.Fprintln(w)
	tw := table(w)
	if by == "box" {
		row(tw, "BOX", "NAME", "HOURS RUN", "SNAPSHOTS", "STORED")
		for _, b := range boxes {
			row(tw, b.GetBox(), b.GetName(), fmt.Sprintf("%.2f", b.GetHours()), count(b.GetSnapshots()), humanBytes(b.GetSnapshotBytes()))
		}
		return tw.Flush()
	}
	type sums struct {
		user            string
		hours           float64
		snapshots, size int64
	}
	var users []*sums
	of := map[string]*sums{}
	for _, b := range boxes {
		s := of[b.GetOwner()]
		if s == nil {
			s = &sums{user: cmp.Or(b.GetOwnerName(), b.GetOwner())}
			of[b.GetOwner()] = s
			users = append(users, s)
		}
		s.hours, s.snapshots, s.size = s.hours+b.GetHours(), s.snapshots+b.GetSnapshots(), s.size+b.GetSnapshotBytes()
	}
	row(tw, "USER", "HOURS RUN", "SNAPSHOTS", "STORED")
	for _, s := range users {
		row(tw, s.user, fmt.Sprintf("%.2f", s.hours), count(s.snapshots), humanBytes(s.size))
	}
	return tw.Flush()
}

func count(n int64) string { return strconv.FormatInt(n, 10) }
