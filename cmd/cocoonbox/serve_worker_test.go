package main

import (
	"strings"
	"testing"
)

func TestServeWorkerNeedsAnEngine(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("COCOONBOX_SANDBOXD_URL", "")
	_, err := run(t, "serve", "worker", "--database-url", "postgres://127.0.0.1:1/cocoonbox")
	if err == nil || err.Error() != "config sandbox.url: is required (COCOONBOX_SANDBOXD_URL)" {
		t.Fatalf("got %v, want the sandbox.url error", err)
	}
	if _, err := run(t, "serve", "worker", "--sandbox-url", "http://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "config postgres.url: is required") {
		t.Fatalf("got %v, want the postgres.url error", err)
	}
}
