package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteHostname: the hostname goes into etc/hostname and one marked line of etc/hosts,
// which a second reseed replaces, leaving the image's own lines.
func TestWriteHostname(t *testing.T) {
	etc := t.TempDir()
	image := "127.0.0.1\tlocalhost box\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	if err := os.WriteFile(filepath.Join(etc, "hosts"), []byte(image), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"dev-fork-1", "dev-fork-2"} {
		if err := writeHostname(h, etc); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(etc, "hostname")); err != nil || string(b) != "dev-fork-2\n" {
		t.Errorf("hostname file = %q, %v", b, err)
	}
	want := image + "127.0.1.1\tdev-fork-2\t" + hostsMark + "\n"
	if b, err := os.ReadFile(filepath.Join(etc, "hosts")); err != nil || string(b) != want {
		t.Errorf("hosts = %q, %v; want %q", b, err, want)
	}
}

// TestCheckHostname: one DNS label, lowercase; anything else is refused before the kernel sees it.
func TestCheckHostname(t *testing.T) {
	for _, h := range []string{"box", "dev-fork-1", "a", "0x", "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabc"} {
		if err := checkHostname(h); err != nil {
			t.Errorf("checkHostname(%q): %v", h, err)
		}
	}
	for _, h := range []string{"", "-a", "a-", "Dev", "a.b", "a b", "a\nb", "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd"} {
		if err := checkHostname(h); err == nil {
			t.Errorf("checkHostname(%q) passed", h)
		}
	}
	if h, ok := reseedHostname([]string{"/sbin/cocoonbox-init", "reseed", "x"}); ok {
		t.Errorf("reseedHostname took a path other than the init's: %q", h)
	}
}
