package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// maxSecretBytes is the API's limit on a secret's value.
const maxSecretBytes = 64 << 10

// vaultCommand manages the caller's secrets. Values go in only: never as a flag (ps would show
// them), never echoed, never read back.
func vaultCommand() *cli.Command {
	return &cli.Command{
		Name:   "vault",
		Usage:  "store secrets (model API keys, tokens) for your boxes and agent runs",
		Action: groupAction,
		Subcommands: []*cli.Command{
			{
				Name:      "set",
				Usage:     "store a secret, replacing any with the same name",
				ArgsUsage: "NAME",
				Description: "The value is read from stdin (printf %s \"$KEY\" | cocoonbox vault set OPENAI_API_KEY) or\n" +
					"from --value-file; at a terminal it is asked for without echo. One trailing newline is\n" +
					"dropped. There is no flag for the value itself, so it never shows in ps.",
				Flags:  apiFlags(&cli.StringFlag{Name: "value-file", Usage: "read the value from this file (- for stdin)"}),
				Action: vaultSet,
			},
			{
				Name:    "ls",
				Aliases: []string{"list"},
				Usage:   "list your secrets by name (values are never shown)",
				Flags:   apiFlags(),
				Action:  vaultLs,
			},
			{
				Name:      "rm",
				Aliases:   []string{"delete"},
				Usage:     "delete a secret",
				ArgsUsage: "NAME",
				Flags:     apiFlags(),
				Action:    vaultRm,
			},
		},
	}
}

func vaultSet(c *cli.Context) error {
	args, err := positional(c, "NAME [--value-file FILE]", 1, 1)
	if err != nil {
		return err
	}
	p, err := newPrinter(c)
	if err != nil {
		return err
	}
	value, err := secretValue(c, p, args[0])
	if err != nil {
		return err
	}
	s, err := open(c)
	if err != nil {
		return err
	}
	defer s.Close()
	sec, err := cbv1.NewVaultServiceClient(s.conn).SetSecret(c.Context, &cbv1.SetSecretRequest{Name: args[0], Value: value})
	if err != nil {
		return apiError(err)
	}
	return s.out.result(sec, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "stored %s\n", sec.GetName())
		return err
	})
}

// secretValue reads the value from --value-file, stdin, or the terminal without echo.
func secretValue(c *cli.Context, p *printer, name string) (string, error) {
	var (
		raw []byte
		err error
	)
	switch file := c.String("value-file"); {
	case file != "" && file != "-":
		raw, err = os.ReadFile(file)
		if err != nil {
			return "", cli.Exit(fmt.Sprintf("vault set: %v", err), exitNotFoundIf(err))
		}
	case p.isTerm(c.App.Reader):
		f := c.App.Reader.(*os.File)
		fmt.Fprintf(p.errw, "Value for %s (not echoed): ", name)
		raw, err = term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(p.errw)
		if err != nil {
			return "", fmt.Errorf("vault set: read value: %w", err)
		}
	default:
		raw, err = io.ReadAll(io.LimitReader(c.App.Reader, maxSecretBytes+2))
		if err != nil {
			return "", fmt.Errorf("vault set: read value: %w", err)
		}
	}
	raw = bytes.TrimSuffix(raw, []byte("\n"))
	raw = bytes.TrimSuffix(raw, []byte("\r"))
	switch {
	case len(raw) == 0:
		return "", usageError("vault set: empty value: pipe it to stdin or pass --value-file")
	case len(raw) > maxSecretBytes:
		return "", usageError("vault set: value is larger than 64 KiB")
	}
	return string(raw), nil
}

func vaultLs(c *cli.Context) error {
	if _, err := positional(c, "", 0, 0); err != nil {
		return err
	}
	s, err := open(c)
	if err != nil {
		return err
	}
	defer s.Close()
	resp, err := cbv1.NewVaultServiceClient(s.conn).ListSecrets(c.Context, &cbv1.ListSecretsRequest{})
	if err != nil {
		return apiError(err)
	}
	return listResult(s.out, resp.GetSecrets(), func(w io.Writer) error { return writeSecrets(w, resp.GetSecrets()) })
}

func vaultRm(c *cli.Context) error {
	args, err := positional(c, "NAME", 1, 1)
	if err != nil {
		return err
	}
	s, err := open(c)
	if err != nil {
		return err
	}
	defer s.Close()
	resp, err := cbv1.NewVaultServiceClient(s.conn).DeleteSecret(c.Context, &cbv1.DeleteSecretRequest{Name: args[0]})
	if err != nil {
		return apiError(err)
	}
	return s.out.result(resp, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "deleted %s\n", args[0])
		return err
	})
}
