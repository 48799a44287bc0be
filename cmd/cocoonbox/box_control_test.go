package main

import (
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// TestBoxTakeOverHandBack: box takeover and box handback call the API on the named box and print
// the box after, with who controls its desktop.
func TestBoxTakeOverHandBack(t *testing.T) {
	f := withFake(t)
	out := runOK(t, "", "box", "takeover", "web")
	if r, _ := f.last("TakeOver").(*cbv1.TakeOverRequest); r.GetBox() != "web" {
		t.Fatalf("TakeOver request %v", r)
	}
	if !strings.Contains(out, "desktop controlled by us_ann") {
		t.Fatalf("takeover printed %q", out)
	}
	out = runOK(t, "", "box", "handback", "--output", "json", "web")
	if r, _ := f.last("HandBack").(*cbv1.HandBackRequest); r.GetBox() != "web" {
		t.Fatalf("HandBack request %v", r)
	}
	if !strings.Contains(out, `"id": "bx_00000000000000a1"`) || !strings.Contains(out, `"controller": ""`) {
		t.Fatalf("handback --output json printed %q", out)
	}
}

// TestDesktopControlHandsBack: a tunnel that took the control lease hands it back when it ends
// (its context cancelled, as Ctrl-C and SIGTERM do), and says so; one whose user held the lease
// before it started leaves it held.
func TestDesktopControlHandsBack(t *testing.T) {
	f := withFake(t)
	stderr, stop := startCLI(t, "desktop", "web", "--control", "--listen", "127.0.0.1:0")
	testutil.Eventually(t, testutil.WaitShort, "the tunnel to open", func() bool {
		return strings.Contains(stderr.String(), "tunnelling web's desktop (control)")
	})
	if f.last("TakeOver") == nil || f.last("HandBack") != nil {
		t.Fatal("the tunnel did not take the lease, or handed it back early")
	}
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if r, _ := f.last("HandBack").(*cbv1.HandBackRequest); r.GetBox() != "bx_00000000000000a1" {
		t.Fatalf("HandBack request %v after the tunnel ended", r)
	}
	if !strings.Contains(stderr.String(), "handed the desktop back") {
		t.Fatalf("stderr %q does not say the desktop was handed back", stderr)
	}

	f = withFake(t)
	if _, err := f.setController("web", "us_ann"); err != nil {
		t.Fatal(err)
	}
	stderr, stop = startCLI(t, "desktop", "web", "--control", "--listen", "127.0.0.1:0")
	testutil.Eventually(t, testutil.WaitShort, "the tunnel to open", func() bool {
		return strings.Contains(stderr.String(), "tunnelling web's desktop (control)")
	})
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if f.last("HandBack") != nil || strings.Contains(stderr.String(), "handed") {
		t.Fatalf("a lease held before the tunnel was handed back: %s", stderr)
	}
}
