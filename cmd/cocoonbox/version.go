package main

import (
	"fmt"
	"runtime"

	"github.com/urfave/cli/v2"

	"github.com/loomhand/cocoonbox/internal/buildinfo"
)

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version",
		Action: func(c *cli.Context) error {
			_, err := fmt.Fprintf(c.App.Writer, "cocoonbox %s (%s, %s/%s)\n", buildinfo.String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
