package main

import (
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxRecordingsCommand() *cli.Command {
	return &cli.Command{
		Name:  "recordings",
		Usage: "list the recorded agent runs of a box (agent run --record)",
		Description: "Each recording replays in the web app beside its run's steps, at\n" +
			"/replay.html#/run/RUN on the API's address.",
		ArgsUsage: "BOX",
		Flags:     apiFlags(),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX", 1, 1)
			if err != nil {
				return err
			}
			s, err := open(c)
			if err != nil {
				return err
			}
			defer s.Close()
			resp, err := cbv1.NewAgentServiceClient(s.conn).ListRecordings(c.Context, &cbv1.ListRecordingsRequest{Box: args[0]})
			if err != nil {
				return apiError(err)
			}
			return listResult(s.out, resp.GetRecordings(), func(w io.Writer) error { return writeRecordings(w, resp.GetRecordings()) })
		},
	}
}

// writeRecordings is `box recordings`.
func writeRecordings(w io.Writer, recs []*cbv1.Recording) error {
	if len(recs) == 0 {
		_, err := fmt.Fprintln(w, "No recordings. Record a run with: cocoonbox agent run --record BOX TASK")
		return err
	}
	tw := table(w)
	row(tw, "RUN", "STARTED", "LENGTH", "SIZE", "REPLAY")
	for _, r := range recs {
		length := "recording"
		if r.GetEndedAt() != nil {
			length = r.GetEndedAt().AsTime().Sub(r.GetStartedAt().AsTime()).Round(time.Second).String()
		}
		row(tw, r.GetRunId(), when(r.GetStartedAt()), length, humanBytes(r.GetBytes()), "/replay.html#/run/"+r.GetRunId())
	}
	return tw.Flush()
}
