package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// reseed gives a box copied from another (a fork, restored with the other's memory) an
// identity of its own: a new machine ID (in /etc/machine-id, and /var/lib/dbus/machine-id
// where the image keeps one), SSH host keys made anew where the image has any, fresh bytes
// mixed into the kernel's entropy, and, when hostname is not empty, that hostname (in the
// kernel, /etc/hostname and /etc/hosts). It prints the new machine ID.
//
// The box's root cannot set the kernel's hostname (the init drops the capability for everything
// it starts): the init sets it itself when the engine asks it to run `reseed HOSTNAME`, before
// it starts this command, which checks it took. Programs that read the hostname before keep
// what they read. A process that seeded a generator of its own before the copy keeps that seed,
// as after any VM fork; gVisor reads its random bytes from the host kernel, so the box's own
// /dev/urandom is not a copy.
func reseed(hostname string) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("reseed: %w", err)
	}
	id := hex.EncodeToString(b[:]) + "\n"
	if err := replaceFile("/etc/machine-id", id, 0o444); err != nil {
		return fmt.Errorf("reseed: %w", err)
	}
	if _, err := os.Lstat("/var/lib/dbus/machine-id"); err == nil {
		if err := replaceFile("/var/lib/dbus/machine-id", id, 0o444); err != nil {
			return fmt.Errorf("reseed: %w", err)
		}
	}
	if f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0); err == nil {
		var mix [64]byte
		_, _ = rand.Read(mix[:])
		_, _ = f.Write(mix[:])
		_ = f.Close()
	}
	if hostname != "" {
		if err := rename(hostname); err != nil {
			return fmt.Errorf("reseed: %w", err)
		}
	}
	if err := newHostKeys(); err != nil {
		return fmt.Errorf("reseed: %w", err)
	}
	fmt.Print(id)
	return nil
}

// newHostKeys replaces the SSH host keys of an image that has them: a fork would otherwise
// answer with its source's keys.
func newHostKeys() error {
	keys, _ := filepath.Glob("/etc/ssh/ssh_host_*")
	if len(keys) == 0 {
		return nil
	}
	for _, k := range keys {
		if err := os.Remove(k); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	out, err := exec.Command("ssh-keygen", "-A").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ssh-keygen -A: %w: %s", err, out)
	}
	return nil
}

// replaceFile writes s to path through a file beside it renamed over it.
func replaceFile(path, s string, mode fs.FileMode) error {
	tmp := path + ".cocoonbox-reseed"
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, []byte(s), mode); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// hostsMark ends the line of /etc/hosts that names the box's hostname, so a later reseed
// replaces it.
const hostsMark = "# cocoonbox hostname"

// rename gives the box hostname: in the kernel (when the init has not already), in
// /etc/hostname and in a line of /etc/hosts, so the name resolves to the box itself.
func rename(hostname string) error {
	if err := checkHostname(hostname); err != nil {
		return err
	}
	if now, _ := os.Hostname(); now != hostname {
		if err := setHostname(hostname); err != nil {
			// A box whose init was started without the capability to set it: the rest of
			// its identity is new, and the name is in /etc for what reads it from there.
			fmt.Fprintf(os.Stderr, "cocoonbox-init: reseed: the hostname stays %s (this box's init cannot set it: %v)\n", now, err)
		}
	}
	return writeHostname(hostname, "/etc")
}

// writeHostname names hostname in etc/hostname and in the line of etc/hosts that ends with
// hostsMark, replacing what an earlier reseed wrote there.
func writeHostname(hostname, etc string) error {
	if err := replaceFile(filepath.Join(etc, "hostname"), hostname+"\n", 0o644); err != nil {
		return err
	}
	hostsPath := filepath.Join(etc, "hosts")
	old, err := os.ReadFile(hostsPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var lines []string
	for line := range strings.Lines(string(old)) {
		if line = strings.TrimRight(line, "\n"); !strings.HasSuffix(line, hostsMark) {
			lines = append(lines, line)
		}
	}
	lines = append(lines, "127.0.1.1\t"+hostname+"\t"+hostsMark)
	return replaceFile(hostsPath, strings.Join(lines, "\n")+"\n", 0o644)
}

// reseedHostname is the hostname of `cocoonbox-init reseed HOSTNAME`, when argv is that.
func reseedHostname(argv []string) (string, bool) {
	if len(argv) == 3 && argv[0] == boxproto.InitPath && argv[1] == "reseed" {
		return argv[2], true
	}
	return "", false
}

// checkHostname refuses what is not one DNS label: 1 to 63 lowercase letters, digits and
// hyphens, not starting or ending with a hyphen.
func checkHostname(h string) error {
	ok := len(h) >= 1 && len(h) <= 63 && h[0] != '-' && h[len(h)-1] != '-'
	for _, c := range []byte(h) {
		ok = ok && (c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
	}
	if !ok {
		return fmt.Errorf("hostname %q: must be 1 to 63 lowercase letters, digits and inner hyphens", h)
	}
	return nil
}
