package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// adminUserCommand is `cocoonbox admin user`: the deployment's accounts, for an admin.
func adminUserCommand() *cli.Command {
	return &cli.Command{
		Name:   "user",
		Usage:  "create, list and disable users (an admin user's token)",
		Action: groupAction,
		Subcommands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "add a user and print their first token's secret, once",
				ArgsUsage: "NAME",
				Description: "In text mode stdout holds only the secret, to hand to the user; their ID goes to\n" +
					"stderr. NAME is a lowercase letter, then up to 62 lowercase letters, digits, dots,\n" +
					"underscores or hyphens.",
				Flags:  apiFlags(&cli.BoolFlag{Name: "admin", Usage: "make the user an admin (may create and disable users)"}),
				Action: adminUserCreate,
			},
			{
				Name:    "ls",
				Aliases: []string{"list"},
				Usage:   "list every user, disabled ones included",
				Flags:   apiFlags(),
				Action:  adminUserLs,
			},
			{
				Name:      "disable",
				Usage:     "disable a user: revoke their tokens and stop their agent runs",
				ArgsUsage: "NAME",
				Description: "Their tokens stop working at once (open streams and desktops end within seconds) and\n" +
					"their running agent runs are cancelled. Their boxes stay: delete them as an admin if\n" +
					"they should go. You cannot disable yourself.",
				Flags:  apiFlags(),
				Action: adminUserDisable,
			},
		},
	}
}

func adminUserCreate(c *cli.Context) error {
	args, err := positional(c, "NAME [--admin]", 1, 1)
	if err != nil {
		return err
	}
	s, accounts, err := accountClient(c)
	if err != nil {
		return err
	}
	defer s.Close()
	resp, err := accounts.CreateUser(c.Context, &cbv1.CreateUserRequest{Name: args[0], Admin: c.Bool("admin")})
	if err != nil {
		return apiError(err)
	}
	return s.out.result(resp, func(w io.Writer) error {
		u := resp.GetUser()
		role := "user"
		if u.GetAdmin() {
			role = "admin"
		}
		s.out.note("Created %s %s (%s). Their first token's secret is shown only now:", role, u.GetName(), u.GetId())
		_, err := fmt.Fprintln(w, resp.GetSecret())
		return err
	})
}

func adminUserLs(c *cli.Context) error {
	if _, err := positional(c, "", 0, 0); err != nil {
		return err
	}
	s, accounts, err := accountClient(c)
	if err != nil {
		return err
	}
	defer s.Close()
	resp, err := accounts.ListUsers(c.Context, &cbv1.ListUsersRequest{})
	if err != nil {
		return apiError(err)
	}
	return listResult(s.out, resp.GetUsers(), func(w io.Writer) error { return writeUsers(w, resp.GetUsers()) })
}

func adminUserDisable(c *cli.Context) error {
	args, err := positional(c, "NAME", 1, 1)
	if err != nil {
		return err
	}
	s, accounts, err := accountClient(c)
	if err != nil {
		return err
	}
	defer s.Close()
	resp, err := accounts.DisableUser(c.Context, &cbv1.DisableUserRequest{User: args[0]})
	if err != nil {
		return apiError(err)
	}
	return s.out.result(resp, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "disabled %s: %d tokens revoked, %d agent runs cancelled\n",
			resp.GetUser().GetName(), resp.GetTokensRevoked(), resp.GetRunsCancelled())
		return err
	})
}

// writeUsers is the user table of admin user ls.
func writeUsers(w io.Writer, users []*cbv1.User) error {
	if len(users) == 0 {
		_, err := fmt.Fprintln(w, "No users.")
		return err
	}
	tw := table(w)
	row(tw, "NAME", "ID", "ROLE", "STATUS", "CREATED")
	for _, u := range users {
		role, status := "user", "active"
		if u.GetAdmin() {
			role = "admin"
		}
		if u.GetDisabledAt() != nil {
			status = "disabled " + when(u.GetDisabledAt())
		}
		row(tw, u.GetName(), u.GetId(), role, status, when(u.GetCreatedAt()))
	}
	return tw.Flush()
}
