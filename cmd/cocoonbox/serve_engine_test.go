package main

import (
	"strings"
	"testing"
)

// TestServeEngineRefusesUnsafeStarts: serve engine does not start with its node endpoints open
// to the network, nor with boxes on the host kernel unless that is asked for by name; each
// refusal is one line naming the setting.
func TestServeEngineRefusesUnsafeStarts(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("COCOONBOX_ENGINE_TOKEN", "")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no token", []string{"--listen", "127.0.0.1:0"}, "config root_token: is required"},
		{"no token beyond loopback", []string{"--listen", "0.0.0.0:0"}, "config root_token: is required"},
		{"insecure no token beyond loopback", []string{"--listen", "0.0.0.0:0", "--insecure-no-token"},
			"config insecure_no_token: only on a loopback listen address"},
		{"process without the opt-in", []string{"--root-token", "x", "--runtime", "process"},
			"set insecure_no_isolation (--insecure-no-isolation)"},
		{"negative max sandboxes", []string{"--root-token", "x", "--max-sandboxes", "-1"}, "config max_sandboxes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, append([]string{"serve", "engine", "--home", home}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
}
