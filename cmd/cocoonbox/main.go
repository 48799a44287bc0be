// Command cocoonbox is every server role of cocoonbox (dev, serve …) and its command-line client.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/loomhand/cocoonbox/internal/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := report(newApp().RunContext(ctx, os.Args), os.Stderr)
	stop()
	os.Exit(code)
}

func newApp() *cli.App {
	return &cli.App{
		Name:    "cocoonbox",
		Usage:   "a persistent cloud computer with a resident agent",
		Version: buildinfo.String(),
		Description: "Scripts: every client command takes --output json (or COCOONBOX_OUTPUT=json) and then prints\n" +
			"exactly one JSON document on stdout; notes and progress go to stderr.\n\n" + exitCodesHelp,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "YAML configuration file", EnvVars: []string{"COCOONBOX_CONFIG"}},
			outputFlag(true),
		},
		Commands: withUsageExits([]*cli.Command{
			devCommand(),
			serveCommand(),
			loginCommand(),
			whoamiCommand(),
			boxCommand(),
			policyCommand(),
			agentCommand(),
			usageCommand(),
			tokenCommand(),
			webhookCommand(),
			vaultCommand(),
			desktopCommand(),
			adminCommand(),
			mcpCommand(),
			completionCommand(),
			versionCommand(),
		}),
		EnableBashCompletion: true,
		HideHelpCommand:      true,
		OnUsageError:         onUsageError,
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usageError("unknown command %q (see cocoonbox --help)", c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
		// Errors are printed once by main, in one line.
		ExitErrHandler: func(*cli.Context, error) {},
	}
}
