package main

import (
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestCommandHelp renders every command's --help against testdata/help/<command>.golden (go
// test -update rewrites them), so help text is reviewed like code and a renamed flag or command
// shows up in the diff of every page that names it.
func TestCommandHelp(t *testing.T) {
	var walk func(path []string, cmds []*cli.Command)
	pages := [][]string{nil}
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden {
				continue
			}
			p := append(append([]string{}, path...), c.Name)
			pages = append(pages, p)
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp().Commands)
	if len(pages) < 20 {
		t.Fatalf("only %d help pages: the walk lost commands", len(pages))
	}
	for _, p := range pages {
		name := "cocoonbox"
		if len(p) > 0 {
			name = strings.Join(p, "_")
		}
		t.Run(name, func(t *testing.T) {
			out, err := run(t, append(p, "--help")...)
			if err != nil {
				t.Fatalf("cocoonbox %s --help: %v", strings.Join(p, " "), err)
			}
			golden(t, "help/"+name, []byte(out))
		})
	}
}
