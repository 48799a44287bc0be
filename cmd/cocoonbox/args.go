package main

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"

	"github.com/loomhand/cocoonbox/internal/config"
)

// apiFlags are the flags of every command that calls the API: clientFlags (with a longer
// --output usage), plus the command's own.
func apiFlags(own ...cli.Flag) []cli.Flag {
	var flags []cli.Flag
	for _, f := range clientFlags() {
		if slices.Contains(f.Names(), "output") {
			f = outputFlag(false)
		}
		if slices.ContainsFunc(own, func(o cli.Flag) bool { return slices.Equal(o.Names(), f.Names()) }) {
			continue // the command's own flag of that name (box exec's --timeout) wins
		}
		flags = append(flags, f)
	}
	return append(flags, own...)
}

// outputFlag is --output, on the app (before the command, where COCOONBOX_OUTPUT applies) and
// on every API command (after it). Only the app's reads the environment, so that an --output
// given on the command line always beats it (see outputJSON).
func outputFlag(fromEnv bool) cli.Flag {
	f := &cli.StringFlag{
		Name: "output", Aliases: []string{"o"}, Value: "text",
		Usage: "text (tables for people) or json (exactly one JSON document on stdout, for scripts)",
	}
	if fromEnv {
		f.EnvVars = []string{"COCOONBOX_OUTPUT"}
	} else {
		f.Usage += "; default $COCOONBOX_OUTPUT or text"
	}
	return f
}

// positional returns the command's arguments, applying flags written after them (urfave/cli
// stops parsing flags at the first argument, but `box rm mybox --yes` is what people type).
// Everything after "--" is an argument. It fails with a usage error unless there are between min
// and max arguments (max < 0: no limit).
func positional(c *cli.Context, usage string, min, max int) ([]string, error) {
	return positionalOf(c, c.Args().Slice(), usage, min, max)
}

// positionalOf is positional over the arguments in.
func positionalOf(c *cli.Context, in []string, usage string, min, max int) ([]string, error) {
	var out []string
	for i := 0; i < len(in); i++ {
		a := in[i]
		if a == "--" {
			out = append(out, in[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			out = append(out, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := commandFlag(c, name)
		if f == nil {
			return nil, usageError("%s: flag provided but not defined: %s (see %s --help)", commandName(c.Command.HelpName), a, c.Command.HelpName)
		}
		if !hasValue {
			if _, isBool := f.(*cli.BoolFlag); isBool {
				value = "true"
			} else if i+1 < len(in) {
				i++
				value = in[i]
			} else {
				return nil, usageError("%s: flag needs an argument: %s", commandName(c.Command.HelpName), a)
			}
		}
		if err := setFlag(c, f, name, value); err != nil {
			return nil, usageError("%s: invalid value %q for flag %s: %v", commandName(c.Command.HelpName), value, a, err)
		}
	}
	if len(out) < min || (max >= 0 && len(out) > max) {
		return nil, usageError("usage: %s %s", c.Command.HelpName, usage)
	}
	return out, nil
}

// setFlag sets a flag found after the arguments. A slice flag's names share one value; other
// flags keep one value per name (urfave/cli copies them across only while parsing), so every
// name is set.
func setFlag(c *cli.Context, f cli.Flag, name, value string) error {
	if _, isSlice := f.(*cli.StringSliceFlag); isSlice {
		return c.Set(name, value)
	}
	for _, n := range f.Names() {
		if err := c.Set(n, value); err != nil {
			return err
		}
	}
	return nil
}

func commandFlag(c *cli.Context, name string) cli.Flag {
	if name == "" {
		return nil
	}
	for _, f := range c.Command.Flags {
		if slices.Contains(f.Names(), name) {
			return f
		}
	}
	return nil
}

// outputJSON reports whether the output is JSON: the innermost --output given on the command
// line wins (after the command, then before it), then COCOONBOX_OUTPUT, then text.
func outputJSON(c *cli.Context) (bool, error) {
	format := ""
	for _, x := range c.Lineage() {
		names := x.LocalFlagNames()
		if slices.Contains(names, "output") || slices.Contains(names, "o") {
			if format = x.String("output"); format != "" {
				break
			}
		}
	}
	switch format {
	case "json":
		return true, nil
	case "text", "":
		return false, nil
	}
	return false, usageError("--output: want text or json, got %q", format)
}

// session is what an API command works with: a connection and a printer.
type session struct {
	conn *grpc.ClientConn
	out  *printer
}

// open validates --output and dials the API. Close the session when done.
func open(c *cli.Context) (*session, error) {
	p, err := newPrinter(c)
	if err != nil {
		return nil, err
	}
	conn, err := dial(c)
	if err != nil {
		return nil, err
	}
	return &session{conn: conn, out: p}, nil
}

func (s *session) Close() { _ = s.conn.Close() }

// resolveCLI is the endpoint and token a command would use: the CLI config, then the
// environment, then --endpoint and --token (as dial resolves them).
func resolveCLI(c *cli.Context) (config.CLI, string, error) {
	env := config.Env()
	path := config.DefaultCLIConfigPath(env)
	cfg, err := config.LoadCLI(path, env)
	if err != nil {
		return config.CLI{}, "", err
	}
	if c.IsSet("endpoint") {
		cfg.Endpoint = c.String("endpoint")
	}
	if c.IsSet("token") {
		cfg.Token = c.String("token")
	}
	return cfg, path, nil
}
