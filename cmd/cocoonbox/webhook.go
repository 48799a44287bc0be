package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// webhookCommand manages the caller's webhooks.
func webhookCommand() *cli.Command {
	return &cli.Command{
		Name:   "webhook",
		Usage:  "signed HTTP deliveries of your boxes' events (box.*, run.*)",
		Action: groupAction,
		Subcommands: []*cli.Command{
			{
				Name:      "add",
				Usage:     "register a URL and print its signing secret, once",
				ArgsUsage: "URL",
				Description: "Each event is POSTed as JSON with X-Cocoonbox-Signature: t=<unix seconds>,v1=<hex\n" +
					"HMAC-SHA256 of \"<t>.<body>\" under the secret>, and retried with backoff until the receiver\n" +
					"answers 2xx. In text mode stdout holds only the secret.\n\n" +
					"   cocoonbox webhook add https://example.com/hooks --event box.hibernated --event run.finished",
				Flags: apiFlags(&cli.StringSliceFlag{Name: "event", Usage: "what to hear: box.*, run.* or an action such as box.hibernated (repeatable; default box.* and run.*)"}),
				Action: func(c *cli.Context) error {
					args, err := positional(c, "URL [--event E]...", 1, 1)
					if err != nil {
						return err
					}
					s, accounts, err := accountClient(c)
					if err != nil {
						return err
					}
					defer s.Close()
					resp, err := accounts.CreateWebhook(c.Context, &cbv1.CreateWebhookRequest{Url: args[0], Events: c.StringSlice("event")})
					if err != nil {
						return apiError(err)
					}
					return s.out.result(resp, func(w io.Writer) error {
						h := resp.GetWebhook()
						s.out.note("Webhook %s for %s (%s) added. Its secret is shown only now:", h.GetId(), h.GetUrl(), strings.Join(h.GetEvents(), ", "))
						_, err := fmt.Fprintln(w, resp.GetSecret())
						return err
					})
				},
			},
			{
				Name:    "ls",
				Aliases: []string{"list"},
				Usage:   "list your webhooks (never their secrets)",
				Flags:   apiFlags(),
				Action: func(c *cli.Context) error {
					if _, err := positional(c, "", 0, 0); err != nil {
						return err
					}
					s, accounts, err := accountClient(c)
					if err != nil {
						return err
					}
					defer s.Close()
					resp, err := accounts.ListWebhooks(c.Context, &cbv1.ListWebhooksRequest{})
					if err != nil {
						return apiError(err)
					}
					return listResult(s.out, resp.GetWebhooks(), func(w io.Writer) error {
						if len(resp.GetWebhooks()) == 0 {
							_, err := fmt.Fprintln(w, "No webhooks.")
							return err
						}
						tw := table(w)
						row(tw, "ID", "URL", "EVENTS", "CREATED")
						for _, h := range resp.GetWebhooks() {
							row(tw, h.GetId(), h.GetUrl(), strings.Join(h.GetEvents(), ","), when(h.GetCreatedAt()))
						}
						return tw.Flush()
					})
				},
			},
			{
				Name:      "rm",
				Usage:     "remove a webhook and its delivery log",
				ArgsUsage: "ID",
				Flags:     apiFlags(),
				Action: func(c *cli.Context) error {
					args, err := positional(c, "ID", 1, 1)
					if err != nil {
						return err
					}
					s, accounts, err := accountClient(c)
					if err != nil {
						return err
					}
					defer s.Close()
					resp, err := accounts.DeleteWebhook(c.Context, &cbv1.DeleteWebhookRequest{Id: args[0]})
					if err != nil {
						return apiError(err)
					}
					return s.out.result(resp, func(io.Writer) error { s.out.note("Webhook %s removed.", args[0]); return nil })
				},
			},
			{
				Name:      "deliveries",
				Usage:     "the webhook's newest delivery attempts: each event, attempt, answer",
				ArgsUsage: "ID",
				Flags:     apiFlags(&cli.IntFlag{Name: "limit", Value: 20, Usage: "how many (1 to 1000)"}),
				Action: func(c *cli.Context) error {
					args, err := positional(c, "ID [--limit N]", 1, 1)
					if err != nil {
						return err
					}
					s, accounts, err := accountClient(c)
					if err != nil {
						return err
					}
					defer s.Close()
					resp, err := accounts.ListDeliveries(c.Context, &cbv1.ListDeliveriesRequest{Id: args[0], Limit: int32(c.Int("limit"))})
					if err != nil {
						return apiError(err)
					}
					return listResult(s.out, resp.GetDeliveries(), func(w io.Writer) error {
						if len(resp.GetDeliveries()) == 0 {
							_, err := fmt.Fprintln(w, "No deliveries yet.")
							return err
						}
						tw := table(w)
						row(tw, "EVENT", "ACTION", "ATTEMPT", "STATUS", "AT", "ERROR")
						for _, d := range resp.GetDeliveries() {
							status := "-"
							if d.GetStatus() != 0 {
								status = fmt.Sprint(d.GetStatus())
							}
							row(tw, fmt.Sprint(d.GetEventId()), d.GetAction(), fmt.Sprint(d.GetAttempt()), status, when(d.GetAt()), d.GetError())
						}
						return tw.Flush()
					})
				},
			},
		},
	}
}
