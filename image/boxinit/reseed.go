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
)

// reseed gives a box copied from another (a fork, restored with the other's memory) an
// identity of its own: a new machine ID (in /etc/machine-id, and /var/lib/dbus/machine-id
// where the image keeps one), SSH host keys made anew where the image has any, and fresh bytes
// mixed into the kernel's entropy. It prints the new machine ID.
//
// What it cannot change: the hostname is "box" in every box (setup sets it and the init then
// drops the capability to change it), and a process that seeded a generator of its own before
// the copy keeps that seed, as after any VM fork. gVisor reads its random bytes from the host
// kernel, so the box's own /dev/urandom is not a copy.
func reseed() error {
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
