package main

import (
	"strings"
	"testing"
)

// TestDesktopListenOffLoopback: a tunnel anyone on the network can reach hands them the desktop
// as the caller, so listening off loopback needs --control said out loud, and is refused before
// any call to the API otherwise.
func TestDesktopListenOffLoopback(t *testing.T) {
	f := withFake(t)
	for _, addr := range []string{"0.0.0.0:5900", ":5900", "[::]:5900", "192.0.2.1:5900", "desk.example:5900"} {
		t.Run(addr, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, "", "desktop", "web", "--listen", addr)
			want := "--listen " + addr + " is off loopback"
			if code != exitUsage || !strings.Contains(stderr, want) || !strings.Contains(stderr, "--control=false") || stdout != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q; want exit %d naming %q and --control=false", code, stderr, stdout, exitUsage, want)
			}
		})
	}
	if f.last("GetBox") != nil || f.last("TakeOver") != nil {
		t.Fatal("a refused --listen reached the API")
	}
}

// TestDesktopListenRule: loopback needs nothing; off loopback an explicit --control, either way,
// is allowed with a warning that says who can reach it.
func TestDesktopListenRule(t *testing.T) {
	for _, c := range []struct {
		addr       string
		controlSet bool
		ok, warns  bool
	}{
		{"127.0.0.1:5900", false, true, false},
		{"127.0.0.9:0", false, true, false},
		{"[::1]:5900", false, true, false},
		{"localhost:5900", false, true, false},
		{"0.0.0.0:5900", false, false, false},
		{":5900", false, false, false},
		{"0.0.0.0:5900", true, true, true},
		{"10.1.2.3:5900", true, true, true},
		{"nope", false, false, false},
	} {
		warning, err := checkListen(c.addr, c.controlSet)
		if (err == nil) != c.ok || (warning != "") != c.warns {
			t.Errorf("checkListen(%q, %v) = %q, %v; want ok %v, warning %v", c.addr, c.controlSet, warning, err, c.ok, c.warns)
		}
	}
}
