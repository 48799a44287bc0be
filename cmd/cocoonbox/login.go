package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/loomhand/cocoonbox/internal/config"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func loginCommand() *cli.Command {
	return &cli.Command{
		Name:  "login",
		Usage: "check an endpoint and token with the API and save them in the CLI config",
		Description: "With --token - the token is read from stdin (or asked for without echo at a terminal), so it\n" +
			"never shows in ps. The CLI config is written with owner-only permissions.",
		Flags:  apiFlags(),
		Action: login,
	}
}

func login(c *cli.Context) error {
	if _, err := positional(c, "--endpoint URL --token TOKEN|-", 0, 0); err != nil {
		return err
	}
	p, err := newPrinter(c)
	if err != nil {
		return err
	}
	if c.String("token") == "-" {
		tok, err := readToken(c, p)
		if err != nil {
			return err
		}
		if err := c.Set("token", tok); err != nil {
			return err
		}
	}
	cfg, path, err := resolveCLI(c)
	if err != nil {
		return err
	}
	if cfg.Endpoint == "" {
		return usageError("login: --endpoint is required")
	}
	if cfg.Token == "" {
		return usageError("login: --token is required (--token - reads it from stdin)")
	}
	s, err := open(c)
	if err != nil {
		return err
	}
	defer s.Close()
	who, err := cbv1.NewAccountServiceClient(s.conn).WhoAmI(c.Context, &cbv1.WhoAmIRequest{})
	if err != nil {
		return apiError(err)
	}
	if err := config.WriteCLI(path, config.CLI{Endpoint: cfg.Endpoint, Token: cfg.Token}); err != nil {
		return err
	}
	return s.out.result(who, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "Logged in to %s as %s (%s); saved to %s\n", cfg.Endpoint, who.GetUser().GetName(), who.GetUser().GetId(), path)
		return err
	})
}

// readToken reads a token from stdin: one line, or without echo at a terminal.
func readToken(c *cli.Context, p *printer) (string, error) {
	var line string
	if p.isTerm(c.App.Reader) {
		fmt.Fprint(p.errw, "Token (not echoed): ")
		raw, err := term.ReadPassword(int(c.App.Reader.(*os.File).Fd()))
		fmt.Fprintln(p.errw)
		if err != nil {
			return "", fmt.Errorf("login: read token: %w", err)
		}
		line = string(raw)
	} else {
		l, err := bufio.NewReader(io.LimitReader(c.App.Reader, 4096)).ReadString('\n')
		if err != nil && err != io.EOF {
			return "", fmt.Errorf("login: read token: %w", err)
		}
		line = l
	}
	tok := strings.TrimSpace(line)
	if tok == "" {
		return "", usageError("login: no token on stdin")
	}
	return tok, nil
}
