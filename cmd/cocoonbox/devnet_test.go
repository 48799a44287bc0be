package main

import (
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/config"
)

// TestDevNetwork: the dev banner's network line follows the configuration; an explicit uplink
// gives new boxes the internet, none gives them nothing, an external engine is its own.
func TestDevNetwork(t *testing.T) {
	for _, tc := range []struct {
		cfg          config.Dev
		line, policy string
	}{
		{config.Dev{EngineNetwork: config.Network{Uplink: "none"}}, "none: boxes reach nothing", "none"},
		{config.Dev{EngineNetwork: config.Network{Uplink: "eth9"}}, "through eth9 (new boxes: internet)", "internet"},
		{config.Dev{EngineNetwork: config.Network{Uplink: "eth9"}, BoxNetwork: "none"}, "(new boxes: none)", "none"},
		{config.Dev{Sandbox: config.Sandbox{URL: "http://sandboxd.test"}}, "as the external sandbox engine gives it", "none"},
	} {
		cfg := tc.cfg
		if line := devNetwork(&cfg); !strings.Contains(line, tc.line) {
			t.Errorf("%+v: %q, want %q", tc.cfg.EngineNetwork, line, tc.line)
		}
		if got := cfg.DefaultBoxNetwork(); got != tc.policy {
			t.Errorf("%+v: new boxes get %q, want %q", tc.cfg.EngineNetwork, got, tc.policy)
		}
	}
}

// TestBoxPortRefusesBadInput: a port out of range and a listen address off loopback are usage
// errors, before anything is dialled.
func TestBoxPortRefusesBadInput(t *testing.T) {
	for args, want := range map[string]string{
		"web 99999":                    "PORT must be a number from 1 to 65535",
		"web http":                     "PORT must be a number from 1 to 65535",
		"web 8000 --listen 0.0.0.0:80": "is off loopback",
		"web 8000 --listen nonsense":   "want host:port",
	} {
		f := strings.Fields(args)
		// Flags after the arguments are what urfave/cli stops at; put them first.
		argv := append([]string{"box", "port"}, f[2:]...)
		argv = append(argv, f[:2]...)
		_, stderr, code := runCLI(t, "", argv...)
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("box port %s: exit %d, %q; want 2 and %q", args, code, stderr, want)
		}
	}
}
