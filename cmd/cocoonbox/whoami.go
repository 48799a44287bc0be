package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func whoamiCommand() *cli.Command {
	return &cli.Command{
		Name:  "whoami",
		Usage: "show the user the configured token belongs to",
		Flags: apiFlags(),
		Action: func(c *cli.Context) error {
			s, err := open(c)
			if err != nil {
				return err
			}
			defer s.Close()
			resp, err := cbv1.NewAccountServiceClient(s.conn).WhoAmI(c.Context, &cbv1.WhoAmIRequest{})
			if err != nil {
				return apiError(err)
			}
			return s.out.result(resp, func(w io.Writer) error {
				u := resp.GetUser()
				_, err := fmt.Fprintf(w, "%s (%s)%s, token %q\n", u.GetName(), u.GetId(), adminSuffix(u.GetAdmin()), resp.GetTokenName())
				return err
			})
		},
	}
}

func adminSuffix(admin bool) string {
	if admin {
		return ", admin"
	}
	return ""
}
