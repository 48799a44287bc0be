package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// credentialEnv names the variable the credential travels in: a command's environment, unlike
// its argv, is not in the engine's logs of commands.
const credentialEnv = "COCOONBOX_CRED"

// isCredential reports whether argv is `cocoonbox-init credential PATH`, which the init runs
// itself instead of spawning it (see serveConn): it is every sandbox's readiness probe, on each
// create and wake, and a process the box starts costs about 13 ms of the 18 of an exec.
func isCredential(argv []string) bool {
	return len(argv) == 3 && argv[0] == boxproto.InitPath && argv[1] == "credential"
}

// credentialCommand is `cocoonbox-init credential PATH` run as a process (by an engine whose
// exec spawns it).
func credentialCommand(path string) error {
	return writeCredential(path, os.Getenv(credentialEnv))
}

// writeCredential writes cred to path unless the file holds it already, through a file beside
// it renamed over it, so the agent never reads half of one; the directory is made (0700) when
// an image lacks it.
func writeCredential(path, cred string) error {
	switch {
	case cred == "":
		return fmt.Errorf("credential: %s is empty", credentialEnv)
	case !filepath.IsAbs(path):
		return fmt.Errorf("credential: path %q is not absolute", path)
	}
	if cur, err := os.ReadFile(path); err == nil && string(cur) == cred {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("credential: %w", err)
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("credential: %w", err)
	}
	_, err = f.WriteString(cred)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("credential: %w", err)
	}
	return nil
}

// credentialFrom is the credential in env (KEY=VALUE entries, the last one winning).
func credentialFrom(env []string) (string, error) {
	for k := len(env) - 1; k >= 0; k-- {
		if v, ok := strings.CutPrefix(env[k], credentialEnv+"="); ok {
			return v, nil
		}
	}
	return "", errors.New("credential: " + credentialEnv + " is not set")
}
