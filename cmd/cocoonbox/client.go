package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loomhand/cocoonbox/internal/config"
)

// clientFlags are shared by every command that talks to the API.
func clientFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "endpoint", Usage: "API endpoint (default from the CLI config written by cocoonbox dev)"},
		&cli.StringFlag{Name: "token", Usage: "API token (default from the CLI config; or COCOONBOX_TOKEN)"},
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text or json"},
	}
}

// dial connects to the API with the caller's token from flags, environment or the CLI config.
func dial(c *cli.Context) (*grpc.ClientConn, error) {
	u, token, err := target(c)
	if err != nil {
		return nil, err
	}
	return dialTarget(u, token)
}

// target is the API endpoint and token the command uses: flags, else the environment, else the
// CLI config.
func target(c *cli.Context) (*url.URL, string, error) {
	env := config.Env()
	cfg, err := config.LoadCLI(config.DefaultCLIConfigPath(env), env)
	if err != nil {
		return nil, "", err
	}
	if c.IsSet("endpoint") {
		cfg.Endpoint = c.String("endpoint")
	}
	if c.IsSet("token") {
		cfg.Token = c.String("token")
	}
	if cfg.Endpoint == "" {
		return nil, "", errors.New("no API endpoint: run `cocoonbox dev`, or pass --endpoint / set COCOONBOX_ENDPOINT")
	}
	if cfg.Token == "" {
		return nil, "", errors.New("no API token: pass --token or set COCOONBOX_TOKEN")
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, "", fmt.Errorf("endpoint: want http://host:port or https://host, got %q", cfg.Endpoint)
	}
	return u, cfg.Token, nil
}

func dialTarget(u *url.URL, token string) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if u.Scheme == "https" {
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	return grpc.NewClient(u.Host,
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(bearerToken{token: token, secure: u.Scheme == "https"}),
	)
}

// bearerToken sends the API token on every call.
type bearerToken struct {
	token  string
	secure bool
}

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false so that the loopback dev endpoint works over h2c.
func (b bearerToken) RequireTransportSecurity() bool { return false }
