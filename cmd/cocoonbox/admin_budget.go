package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// adminBudgetCommand is `cocoonbox admin budget USER`: show or set a user's monthly tokens.
func adminBudgetCommand() *cli.Command {
	return &cli.Command{
		Name:      "budget",
		Usage:     "show or set a user's monthly budgets: model tokens and box-hours",
		ArgsUsage: "USER",
		Description: "A user's runs stop, failed with a budget error, before the model call after their runs\n" +
			"used their tokens in a calendar month (UTC); their creates and wakes are refused once their\n" +
			"boxes ran their box-hours. 0 removes a budget.",
		Flags: apiFlags(
			&cli.Int64Flag{Name: "tokens-per-month", Usage: "set the budget to `N` input and output tokens a month (0: none)"},
			&cli.Float64Flag{Name: "box-hours-per-month", Usage: "set the budget to `H` hours of running boxes a month (0: none)"},
		),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "USER", 1, 1)
			if err != nil {
				return err
			}
			req := &cbv1.SetBudgetRequest{User: args[0]}
			if c.IsSet("tokens-per-month") {
				n := c.Int64("tokens-per-month")
				if n < 0 {
					return usageError("--tokens-per-month must be 0 or more")
				}
				req.TokensPerMonth = &n
			}
			if c.IsSet("box-hours-per-month") {
				h := c.Float64("box-hours-per-month")
				if !(h >= 0) {
					return usageError("--box-hours-per-month must be 0 or more")
				}
				req.BoxHoursPerMonth = &h
			}
			s, err := open(c)
			if err != nil {
				return err
			}
			defer s.Close()
			b, err := cbv1.NewAccountServiceClient(s.conn).SetBudget(c.Context, req)
			if err != nil {
				return apiError(err)
			}
			return s.out.result(b, func(w io.Writer) error {
				tokens, hours := "no budget", "no budget"
				if b.GetTokensPerMonth() > 0 {
					tokens = fmt.Sprintf("%d a month", b.GetTokensPerMonth())
				}
				if b.GetBoxHoursPerMonth() > 0 {
					hours = fmt.Sprintf("%g a month", b.GetBoxHoursPerMonth())
				}
				_, err := fmt.Fprintf(w, "%s\ntokens:     %s; %d used this month\nbox-hours:  %s; %.2f used this month\n",
					b.GetUser(), tokens, b.GetTokensUsed(), hours, b.GetBoxHoursUsed())
				return err
			})
		},
	}
}
