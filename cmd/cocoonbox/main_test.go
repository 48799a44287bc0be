package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run executes the real command line in-process and returns what it printed and its error.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	err := app.Run(append([]string{"cocoonbox"}, args...))
	return out.String(), err
}

func TestStartupErrorsAreOneLine(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("XDG_CONFIG_HOME", "")
	bad := filepath.Join(home, "bad.yaml")
	if err := os.WriteFile(bad, []byte("listen: [127.0.0.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(home, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	nokey := filepath.Join(home, "keys", "master.key")
	pass := filepath.Join(home, "backup.pass")
	if err := os.WriteFile(pass, []byte("a passphrase of some length\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COCOONBOX_BACKUP_PASSPHRASE", "")
	t.Setenv("COCOONBOX_DATABASE_URL", "")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"malformed config", []string{"--config", bad, "dev"}, "config " + bad + ": line"},
		{"missing config", []string{"--config", filepath.Join(home, "none.yaml"), "dev"}, "none.yaml: no such file or directory"},
		{"data dir under a file", []string{"dev", "--home", filepath.Join(file, "home")}, "data dir " + filepath.Join(file, "home") + ": "},
		{"bad listen flag", []string{"dev", "--listen", "nonsense"}, "config listen: want host:port"},
		{"whoami without a config", []string{"whoami"}, "no API endpoint"},
		// Outside dev no role makes a key of its own: it would open nothing sealed before.
		{"worker without the keyring", []string{"serve", "worker", "--database-url", "postgres://127.0.0.1:1/x",
			"--sandbox-url", "http://127.0.0.1:1", "--keyring", nokey}, "load keyring " + nokey + ": no such file"},
		{"api without the keyring", []string{"serve", "api", "--listen", "127.0.0.1:0", "--database-url",
			"postgres://127.0.0.1:1/x", "--sandbox-url", "http://127.0.0.1:1", "--keyring", nokey}, "load keyring " + nokey + ": no such file"},
		{"backup to a bad location", []string{"admin", "backup", "--to", "https://x/y"}, "to: want s3://BUCKET/PREFIX"},
		{"backup without a database", []string{"admin", "backup", "--to", "s3://b/p"}, "database-url: is required"},
		{"backup without a passphrase", []string{"admin", "backup", "--to", "s3://b/p", "--database-url", "postgres://127.0.0.1:1/x"},
			"passphrase-file: is required"},
		{"backup without the keyring", []string{"admin", "backup", "--to", "s3://bkp/p", "--database-url", "postgres://127.0.0.1:1/x",
			"--passphrase-file", pass, "--keyring", nokey}, "seal keyring " + nokey + ": no such file"},
		{"restore of a bucket", []string{"admin", "restore", "--from", "s3://b"}, "from: name the backup's folder"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	out, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "cocoonbox ") {
		t.Fatalf("version: %q %v", out, err)
	}
}

// TestAdminKeyringInit: the deployment's key is made once, 0600, where --keyring says, a second
// init refuses to replace it, and a rotation adds a new primary key before it.
func TestAdminKeyringInit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "master.key")
	out, err := run(t, "admin", "keyring", "init", "--keyring", path)
	if err != nil || !strings.Contains(out, "created keyring "+path) {
		t.Fatalf("init: %q, %v", out, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want mode 0600", fi, err)
	}
	key, _ := os.ReadFile(path)
	if _, err := run(t, "admin", "keyring", "init", "--keyring", path); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("second init: %v, want a refusal", err)
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(key, again) {
		t.Fatal("the second init replaced the key")
	}
	// A rotation puts a new key first and keeps the old one after it, mode 0600 still.
	out, err = run(t, "admin", "keyring", "rotate", "--keyring", path)
	if err != nil || !strings.Contains(out, "rotated keyring "+path) || !strings.Contains(out, "1 older kept") {
		t.Fatalf("rotate: %q, %v", out, err)
	}
	rotated, _ := os.ReadFile(path)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 || len(rotated) != 2*len(key) || !bytes.Equal(rotated[len(key):], key) {
		t.Fatalf("rotated key file: %v, %v, %d bytes; want the old key kept after a new one, mode 0600", fi, err, len(rotated))
	}
	if _, err := run(t, "admin", "keyring", "rotate", "--keyring", path+".missing"); err == nil || !strings.Contains(err.Error(), "keyring init") {
		t.Fatalf("rotate a missing file: %v, want the command that creates one", err)
	}
}
