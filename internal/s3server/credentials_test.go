package s3server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadOrCreateCredentials(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "s3-credentials.yaml")

	access, secret, err := LoadOrCreateCredentials(path)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if len(access) != 20 || len(secret) != 40 {
		t.Errorf("got access %q (%d) secret of %d chars, want 20 and 40", access, len(access), len(secret))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}

	a2, s2, err := LoadOrCreateCredentials(path)
	if err != nil || a2 != access || s2 != secret {
		t.Fatalf("reload: got %q %q %v, want the same keys", a2, s2, err)
	}

	other := filepath.Join(t.TempDir(), "c")
	a3, _, err := LoadOrCreateCredentials(other)
	if err != nil || a3 == access {
		t.Errorf("second file: got %q %v, want fresh keys", a3, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("dir holds %d entries, want only the credentials file", len(entries))
	}
}

func TestLoadCredentialsFormats(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, body, wantErr string
	}{
		{"yaml", "access_key: AK\nsecret_key: SK\n", ""},
		{"json", `{"access_key": "AK", "secret_key": "SK"}`, ""},
		{"no secret", "access_key: AK\n", "secret_key is missing"},
		{"no access", "secret_key: SK\n", "access_key is missing"},
		{"garbage", "access_key: [", "parse s3 credentials"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.Repeat("x", i+1))
			if err := os.WriteFile(path, []byte(tt.body), 0o644); err != nil {
				t.Fatal(err)
			}
			access, secret, err := LoadOrCreateCredentials(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want %q", err, tt.wantErr)
				}
				if b, _ := os.ReadFile(path); string(b) != tt.body {
					t.Errorf("a bad file was rewritten: %q", b)
				}
				return
			}
			if err != nil || access != "AK" || secret != "SK" {
				t.Fatalf("got %q %q %v, want AK SK", access, secret, err)
			}
			// A readable-by-others file is tightened, not refused.
			if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want 0600", fi.Mode().Perm())
			}
		})
	}
}
