package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAutoNeverFallsBack: "auto" means gVisor. A host where runsc is present but cannot start a
// sandbox gets a startup error that says why and how to choose otherwise, never a box that runs
// on the host kernel without a sandbox.
func TestAutoNeverFallsBack(t *testing.T) {
	dir := shortTempDir(t)
	broken := filepath.Join(dir, "runsc")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'runsc: cannot create sandbox: no ptrace' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt, err := New("", Options{DataDir: filepath.Join(dir, "data"), Runsc: broken})
	if err == nil {
		closeAtEnd(t, rt)
		t.Fatalf("auto with a runsc that cannot run chose %q; want a startup error", rt.Name())
	}
	for _, want := range []string{"no ptrace", "gvisor", "process", "no isolation"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("auto's error %q does not mention %q", err, want)
		}
	}
}

// TestProcessNeedsNoIsolationOptIn: the process runtime, whose boundary is the host kernel's
// namespaces, runs only when asked for by name together with the explicit no-isolation option.
func TestProcessNeedsNoIsolationOptIn(t *testing.T) {
	dir := shortTempDir(t)
	rt, err := New(NameProcess, Options{DataDir: dir})
	if err == nil {
		closeAtEnd(t, rt)
		t.Fatal("the process runtime started without the no-isolation option")
	}
	if !strings.Contains(err.Error(), "insecure-no-isolation") {
		t.Errorf("error %q does not say how to opt in", err)
	}
	rt, err = New(NameProcess, Options{DataDir: dir, InsecureNoIsolation: true})
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, rt)
	if rt.Capabilities().Sandboxed {
		t.Error("the process runtime claims a sandbox")
	}
}
