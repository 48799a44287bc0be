package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// tokenCommand manages the caller's API tokens.
func tokenCommand() *cli.Command {
	return &cli.Command{
		Name:   "token",
		Usage:  "create, list and revoke your API tokens",
		Action: groupAction,
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "create a token and print its secret, once",
				Description: "In text mode stdout holds only the secret, so TOKEN=$(cocoonbox token create --name ci)\n" +
					"works; the token's ID and expiry go to stderr.",
				Flags: apiFlags(
					&cli.StringFlag{Name: "name", Usage: "what the token is for (required)"},
					&cli.DurationFlag{Name: "ttl", Usage: "expire the token after this long, e.g. 720h (default: never; at most what the calling token has left)"},
					&cli.StringFlag{Name: "scope", Usage: "what the token may do: full, read (only calls that change nothing) or mcp (only /mcp)", Value: "full"},
				),
				Action: tokenCreate,
			},
			{
				Name:    "ls",
				Aliases: []string{"list"},
				Usage:   "list your tokens (never their secrets)",
				Flags:   apiFlags(),
				Action:  tokenLs,
			},
			{
				Name:      "revoke",
				Usage:     "revoke a token at once",
				ArgsUsage: "ID",
				Flags:     apiFlags(),
				Action:    tokenRevoke,
			},
		},
	}
}

func tokenCreate(c *cli.Context) error {
	if _, err := positional(c, "--name NAME [--ttl 720h] [--scope full|read|mcp]", 0, 0); err != nil {
		return err
	}
	if c.String("name") == "" {
		return usageError("token create: --name is required")
	}
	ttl := c.Duration("ttl")
	if c.IsSet("ttl") && ttl < 1e9 {
		return usageError("token create: --ttl must be at least 1s, got %s", ttl)
	}
	s, accounts, err := accountClient(c)
	if err != nil {
		return err
	}
	defer s.Close()
	resp, err := accounts.CreateToken(c.Context, &cbv1.CreateTokenRequest{
		Name: c.String("name"), TtlSeconds: int64(ttl.Seconds()), Scope: c.String("scope"),
	})
	if err != nil {
		return apiError(err)
	}
	return s.out.result(resp, func(w io.Writer) error {
		t := resp.GetToken()
		expires := "never expires"
		if t.GetExpiresAt() != nil {
			expires = "expires " + when(t.GetExpiresAt())
		}
		s.out.note("Token %s (%q, scope %s) created; it %s. The secret is shown only now:", t.GetId(), t.GetName(), tokenScope(t), expires)
		_, err := fmt.Fprintln(w, resp.GetSecret())
		return err
	})
}

func tokenLs(c *cli.Context) error {
	if _, err := positional(c, "", 0, 0); err != nil {
		return err
	}
	s, accounts, err := accountClient(c)
	if err != nil {
		return err
	}
	defer s.Close()
	resp, err := accounts.ListTokens(c.Context, &cbv1.ListTokensRequest{})
	if err != nil {
		return apiError(err)
	}
	return listResult(s.out, resp.GetTokens(), func(w io.Writer) error { return writeTokens(w, resp.GetTokens(), s.out.now()) })
}

func tokenRevoke(c *cli.Context) error {
	args, err := positional(c, "ID", 1, 1)
	if err != nil {
		return err
	}
	s, accounts, err := accountClient(c)
	if err != nil {
		return err
	}
	defer s.Close()
	resp, err := accounts.RevokeToken(c.Context, &cbv1.RevokeTokenRequest{Id: args[0]})
	if err != nil {
		return apiError(err)
	}
	return s.out.result(resp, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "revoked %s\n", args[0])
		return err
	})
}
