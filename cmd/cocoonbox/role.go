package main

import (
	"log/slog"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
)

// role is how a `serve` command's flags map onto its configuration, which config.Load already
// filled from the file, the environment and the defaults.
type role struct {
	strings map[string]*string // flag name → field
	bools   map[string]*bool
	ints    map[string]*int
	paths   []*string    // fields made absolute after the flags apply (empty ones stay empty)
	level   *string      // the log level field
	check   func() error // the configuration's Validate, on a pointer: it runs after the flags apply
}

// loadRole applies the flags that were set, makes the role's paths absolute, validates, and
// returns the role's logger (text on stderr, at its level), so every role reads its
// configuration the same way.
func loadRole(c *cli.Context, r role) (*slog.Logger, error) {
	for flag, dst := range r.strings {
		if c.IsSet(flag) {
			*dst = c.String(flag)
		}
	}
	for flag, dst := range r.bools {
		if c.IsSet(flag) {
			*dst = c.Bool(flag)
		}
	}
	for flag, dst := range r.ints {
		if c.IsSet(flag) {
			*dst = c.Int(flag)
		}
	}
	for _, p := range r.paths {
		if *p == "" {
			continue
		}
		if abs, err := filepath.Abs(*p); err == nil {
			*p = abs
		}
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(*r.level))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})), nil
}
