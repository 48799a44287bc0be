package storetest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSweep checks that only directories of dead test binaries are removed: a live binary holds
// its lock, and a directory not locked yet may belong to a binary that is just starting.
func TestSweep(t *testing.T) {
	mk := func() string {
		dir, err := os.MkdirTemp("", runPrefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	live, dead, starting := mk(), mk(), mk()
	f, err := lock(filepath.Join(live, "lock"), true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := lock(filepath.Join(dead, "lock"), true)
	if err != nil {
		t.Fatal(err)
	}
	g.Close() // its binary died

	sweep()
	for dir, want := range map[string]bool{live: true, dead: false, starting: true} {
		if _, err := os.Stat(dir); (err == nil) != want {
			t.Errorf("%s: exists = %v, want %v", dir, err == nil, want)
		}
	}
}
