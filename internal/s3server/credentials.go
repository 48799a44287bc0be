package s3server

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// credentialsFile is the on-disk form; YAML, so a JSON file also parses.
type credentialsFile struct {
	AccessKey string `yaml:"access_key"`
	SecretKey string `yaml:"secret_key"`
}

const credentialsHeader = "# cocoonbox embedded S3 server root credentials; keep private.\n"

// LoadOrCreateCredentials reads the access and secret key from path, or
// generates random ones and writes them there (mode 0600), so a restarted dev
// stack keeps the keys its clients were configured with. Concurrent first
// calls agree on one pair: the file appears atomically and only once.
func LoadOrCreateCredentials(path string) (access, secret string, err error) {
	access, secret, err = readCredentials(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return access, secret, err
	}
	access, secret, err = newCredentials()
	if err != nil {
		return "", "", err
	}
	if err := writeNew(path, access, secret); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Lost a race with another process: use its keys.
			return readCredentials(path)
		}
		return "", "", err
	}
	return access, secret, nil
}

func readCredentials(path string) (string, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", fmt.Errorf("read s3 credentials: %w", err)
	}
	var c credentialsFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		return "", "", fmt.Errorf("parse s3 credentials %s: %w", path, err)
	}
	// Regenerating would silently orphan whoever holds the old keys.
	if c.AccessKey == "" {
		return "", "", fmt.Errorf("parse s3 credentials %s: access_key is missing", path)
	}
	if c.SecretKey == "" {
		return "", "", fmt.Errorf("parse s3 credentials %s: secret_key is missing", path)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return "", "", fmt.Errorf("restrict s3 credentials %s: %w", path, err)
		}
	}
	return c.AccessKey, c.SecretKey, nil
}

// newCredentials makes AWS-shaped keys: a 20-character upper-case access key
// and a 40-character secret, both safe to paste into shells and URLs.
func newCredentials() (string, string, error) {
	b := make([]byte, 15+30)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("generate s3 credentials: %w", err)
	}
	access := "CB" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:15])[:18]
	secret := base64.RawURLEncoding.EncodeToString(b[15:])
	return access, secret, nil
}

// writeNew writes a temporary file and hard-links it into place, which fails
// with fs.ErrExist instead of overwriting a file another process just made.
func writeNew(path, access, secret string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create s3 credentials dir: %w", err)
	}
	body, err := yaml.Marshal(credentialsFile{AccessKey: access, SecretKey: secret})
	if err != nil {
		return fmt.Errorf("encode s3 credentials: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".s3-credentials-*")
	if err != nil {
		return fmt.Errorf("write s3 credentials: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.WriteString(credentialsHeader + string(body)); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write s3 credentials: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write s3 credentials: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write s3 credentials: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return fmt.Errorf("write s3 credentials: %w", err)
	}
	return nil
}
