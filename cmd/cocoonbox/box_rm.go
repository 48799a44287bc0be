package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxRmCommand() *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Aliases:   []string{"delete"},
		Usage:     "delete a box (asks first when run in a terminal, unless --yes)",
		ArgsUsage: "BOX",
		Flags: apiFlags(
			&cli.BoolFlag{Name: "purge-snapshots", Usage: "delete the box's snapshots too"},
			&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask"},
		),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX [--purge-snapshots] [--yes]", 1, 1)
			if err != nil {
				return err
			}
			p, err := newPrinter(c)
			if err != nil {
				return err
			}
			if !c.Bool("yes") && p.isTerm(c.App.Reader) {
				what := "box " + args[0]
				if c.Bool("purge-snapshots") {
					what += " and all its snapshots"
				}
				ok, err := confirm(c.App.Reader, p.errw, "Delete "+what+"?")
				if err != nil {
					return err
				}
				if !ok {
					return cli.Exit("not deleted", exitError)
				}
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			// By its ID: once deleted, a box's name names nothing, so a resend of this delete
			// after a lost answer must not go by name.
			id, err := boxIDOf(c.Context, boxes, args[0])
			if err != nil {
				return err
			}
			b, err := boxes.DeleteBox(c.Context, &cbv1.DeleteBoxRequest{Box: string(id), PurgeSnapshots: c.Bool("purge-snapshots"), RequestId: requestID()})
			if err != nil {
				return apiError(err)
			}
			return s.out.result(b, func(w io.Writer) error { return boxLine(w, b) })
		},
	}
}

// confirm asks question on w and reads a yes or no from in; anything but yes is no.
func confirm(in io.Reader, w io.Writer, question string) (bool, error) {
	fmt.Fprintf(w, "%s [y/N] ", question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && err != io.EOF {
		return false, fmt.Errorf("read answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}
