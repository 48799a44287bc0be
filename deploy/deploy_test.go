// Package deploy_test checks the files operators install from deploy/: the systemd units are
// what systemd-analyze accepts without a warning, and keep the hardening their roles allow.
// (deploy/caddy's Caddyfile is validated and driven in internal/devstack's TestCaddyInFront.)
package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnits: systemd-analyze verify accepts each unit without a word (it exits 0 on an
// unknown key or a bad value, only saying so, so any output fails), with ExecStart's binary
// standing in for /usr/local/bin/cocoonbox; the API and the worker run unprivileged and
// sandboxed, and every role restarts on failure.
func TestSystemdUnits(t *testing.T) {
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is not installed: run make deps")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	units, err := filepath.Glob(filepath.Join("systemd", "*.service"))
	if err != nil || len(units) != 3 {
		t.Fatalf("units %v, %v; want the api, worker and engine units", units, err)
	}
	dir := t.TempDir()
	var copies []string
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		want := []string{"Restart=on-failure", "ProtectHome=yes", "UMask=0077"}
		if !strings.Contains(u, "engine") {
			want = append(want, "User=cocoonbox", "NoNewPrivileges=yes", "ProtectSystem=strict", "CapabilityBoundingSet=\n")
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s lacks %q", u, strings.TrimSpace(w))
			}
		}
		c := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(c, []byte(strings.ReplaceAll(text, "/usr/local/bin/cocoonbox", self)), 0o644); err != nil {
			t.Fatal(err)
		}
		copies = append(copies, c)
	}
	out, err := exec.Command(bin, append([]string{"verify"}, copies...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
