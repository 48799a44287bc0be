package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// TestWriteCredential: a first credential makes its directory and a 0600 file; the same one
// again leaves the file untouched; another replaces it whole; an empty credential or a relative
// path is refused, leaving what was there.
func TestWriteCredential(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "cocoonbox", "agent-credential")
	if err := writeCredential(path, "c1"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("first write: %v, %v", fi, err)
	}
	if di, err := os.Stat(filepath.Dir(path)); err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("directory: %v, %v", di, err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if err := writeCredential(path, "c1"); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); !fi.ModTime().Equal(old) {
		t.Fatal("the same credential rewrote the file")
	}
	if err := writeCredential(path, "c2"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ path, cred string }{{path, ""}, {"run/agent-credential", "c3"}} {
		if err := writeCredential(bad.path, bad.cred); err == nil {
			t.Errorf("writeCredential(%q, %q) took it", bad.path, bad.cred)
		}
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "c2" {
		t.Fatalf("after the refusals: %q, %v", b, err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("a temporary file is left: %v", err)
	}
}

// TestIsCredential: only the init's own path with the credential command and one path is run
// by the init itself.
func TestIsCredential(t *testing.T) {
	for argv, want := range map[string][]string{
		"yes":        {boxproto.InitPath, "credential", "/run/x"},
		"other path": {"/tmp/cocoonbox-init", "credential", "/run/x"},
		"no path":    {boxproto.InitPath, "credential"},
		"other verb": {boxproto.InitPath, "relay", "init"},
	} {
		if got := isCredential(want); got != (argv == "yes") {
			t.Errorf("%s: isCredential(%q) = %v", argv, want, got)
		}
	}
}
