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
		Usage:     "show or set a user's monthly token budget",
		ArgsUsage: "USER",
		Description: "A user's runs stop, failed with a budget error, before the model call after their runs\n" +
			"used the budget in a calendar month (UTC). --tokens-per-month 0 removes it.",
		Flags: apiFlags(
			&cli.Int64Flag{Name: "tokens-per-month", Usage: "set the budget to `N` input and output tokens a month (0: none)"},
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
				limit := "no budget"
				if b.GetTokensPerMonth() > 0 {
					limit = fmt.Sprintf("%d tokens a month", b.GetTokensPerMonth())
				}
				_, err := fmt.Fprintf(w, "%s: %s; %d used this month\n", b.GetUser(), limit, b.GetTokensUsed())
				return err
			})
		},
	}
}
