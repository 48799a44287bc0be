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
