package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// eventsPoll is how often box events --follow asks for new events.
const eventsPoll = time.Second

func boxEventsCommand() *cli.Command {
	return &cli.Command{
		Name:      "events",
		Usage:     "show what happened to a box: who did what, why it slept or woke, its snapshots",
		ArgsUsage: "BOX",
		Description: "Prints the newest events, oldest first, one line each: time, actor (a user ID, or worker\n" +
			"for what the box did on its own), action and detail. With --follow, keeps printing new\n" +
			"events until Ctrl-C. With --output json: a JSON array, or with --follow one JSON object\n" +
			"per line. Needs the driver role.",
		Flags: apiFlags(
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new events until Ctrl-C"},
			&cli.IntFlag{Name: "limit", Value: 100, Usage: "how many of the newest events to show first (1 to 1000)"},
		),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX [--follow] [--limit N]", 1, 1)
			if err != nil {
				return err
			}
			if n := c.Int("limit"); n < 1 || n > 1000 {
				return usageError("box events: --limit must be from 1 to 1000, got %d", n)
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			req := &cbv1.ListEventsRequest{Box: args[0], Limit: int32(c.Int("limit"))}
			resp, err := boxes.ListEvents(c.Context, req)
			if err != nil {
				return apiError(err)
			}
			if !c.Bool("follow") {
				return listResult(s.out, resp.GetEvents(), func(w io.Writer) error { return writeBoxEvents(w, resp.GetEvents()) })
			}
			write := func(events []*cbv1.BoxEvent) error {
				if !s.out.json {
					return writeBoxEvents(s.out.w, events)
				}
				for _, e := range events {
					if err := writeJSONLine(s.out.w, e); err != nil {
						return err
					}
				}
				return nil
			}
			for {
				events := resp.GetEvents()
				if err := write(events); err != nil {
					return err
				}
				if len(events) > 0 {
					req.AfterId = events[len(events)-1].GetId()
				}
				req.Limit = 1000
				select {
				case <-c.Context.Done():
					return nil // Ctrl-C ends following
				case <-time.After(eventsPoll):
				}
				if resp, err = boxes.ListEvents(c.Context, req); err != nil {
					if errors.Is(c.Context.Err(), context.Canceled) {
						return nil
					}
					return apiError(err)
				}
			}
		},
	}
}

// writeBoxEvents prints events one line each: time, actor, action, detail.
func writeBoxEvents(w io.Writer, events []*cbv1.BoxEvent) error {
	for _, e := range events {
		line := strings.Join([]string{when(e.GetAt()), e.GetActor(), e.GetAction()}, "  ")
		if d := eventDetail(e.GetDetail()); d != "" {
			line += "  " + d
		}
		line = strings.Map(func(r rune) rune { // a path or a box's message never drives the terminal
			if unicode.IsControl(r) {
				return ' '
			}
			return r
		}, line)
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// eventDetail is an event's detail for people: the text of a {"detail": …} object, otherwise
// the object's fields as key=value, in order of their names.
func eventDetail(raw string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil || len(m) == 0 {
		return strings.TrimSpace(raw)
	}
	if d, ok := m["detail"].(string); ok && len(m) == 1 {
		return d
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v, _ := json.Marshal(m[k])
		parts = append(parts, k+"="+strings.Trim(string(v), `"`))
	}
	return strings.Join(parts, " ")
}
