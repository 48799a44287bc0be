package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBootHook(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name    string
		path    string
		run     bool
		wantErr bool
	}{
		{"missing", filepath.Join(dir, "none"), false, false},
		{"executable", write("exe", 0o755), true, false},
		{"not executable", write("plain", 0o644), false, true},
		{"directory", dir, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, err := bootHook(tc.path)
			if run != tc.run || (err != nil) != tc.wantErr {
				t.Fatalf("bootHook(%s) = %v, %v; want run %v, error %v", tc.path, run, err, tc.run, tc.wantErr)
			}
		})
	}
}

// TestStartBoot runs the hook the way the init does, without being PID 1: as a child of this
// process, with this process's environment, reaped through the reaper.
func TestStartBoot(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	hook := filepath.Join(dir, "boot")
	script := "#!/bin/sh\necho \"$BOOT_GREETING from $(pwd)\" > \"$BOOT_OUT\"\n"
	if err := os.WriteFile(hook, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BOOT_GREETING", "hello")
	t.Setenv("BOOT_OUT", out)
	r := &reaper{waiters: map[int]chan syscall.WaitStatus{}}
	startBoot(r, hook)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.reap()
		r.mu.Lock()
		left := len(r.waiters)
		r.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the boot hook was not reaped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, err := os.ReadFile(out)
	if err != nil || strings.TrimSpace(string(got)) != "hello from /" {
		t.Fatalf("boot hook wrote %q, %v", got, err)
	}

	// No hook: nothing is spawned.
	startBoot(r, filepath.Join(dir, "none"))
	if len(r.waiters) != 0 {
		t.Fatal("spawned a missing boot hook")
	}
}
