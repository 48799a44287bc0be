// Command cocoonbox is every server role of cocoonbox (dev, serve …) and its command-line client.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/loomhand/cocoonbox/internal/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newApp().RunContext(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "cocoonbox:", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:    "cocoonbox",
		Usage:   "a persistent cloud computer with a resident agent",
		Version: buildinfo.String(),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "YAML configuration file", EnvVars: []string{"COCOONBOX_CONFIG"}},
		},
		Commands: []*cli.Command{
			devCommand(),
			serveCommand(),
			whoamiCommand(),
			versionCommand(),
		},
		HideHelpCommand: true,
		// Errors are printed once by main, in one line.
		ExitErrHandler: func(*cli.Context, error) {},
	}
}
