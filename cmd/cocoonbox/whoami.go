package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func whoamiCommand() *cli.Command {
	return &cli.Command{
		Name:  "whoami",
		Usage: "show the user the configured token belongs to",
		Flags: clientFlags(),
		Action: func(c *cli.Context) error {
			conn, err := dial(c)
			if err != nil {
				return err
			}
			defer conn.Close()
			resp, err := cbv1.NewAccountServiceClient(conn).WhoAmI(c.Context, &cbv1.WhoAmIRequest{})
			if err != nil {
				return rpcError(err)
			}
			u := resp.GetUser()
			if c.String("output") == "json" {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{
					"id": u.GetId(), "name": u.GetName(), "admin": u.GetAdmin(),
					"created_at": u.GetCreatedAt().AsTime().Format(time.RFC3339), "token_name": resp.GetTokenName(),
				})
			}
			_, err = fmt.Fprintf(c.App.Writer, "%s (%s)%s, token %q\n", u.GetName(), u.GetId(), adminSuffix(u.GetAdmin()), resp.GetTokenName())
			return err
		},
	}
}

func adminSuffix(admin bool) string {
	if admin {
		return ", admin"
	}
	return ""
}
