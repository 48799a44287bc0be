package secrets

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// LoadOrCreateKeyring returns the keyring whose master key is in the file at path, creating the
// file with a new random key on first use. The file holds the KeySize raw key bytes and must be
// readable by this user only: a key file that group or others can read, or of the wrong length,
// is refused with an error naming the path rather than used or replaced, since replacing a key
// would make every stored secret unreadable.
func LoadOrCreateKeyring(path string) (*Keyring, error) {
	key, err := readKeyFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key, err = createKeyFile(path)
		if errors.Is(err, os.ErrExist) {
			// Another process created it first; use that key.
			key, err = readKeyFile(path)
		}
	}
	return keyring(path, key, err)
}

// LoadKeyring returns the keyring whose master key is in the file at path, checked as
// LoadOrCreateKeyring checks it. A missing file is an error naming it and how to make one, never
// a new key: a role of a deployment that made its own key would seal with it and open nothing
// sealed before (every stored sandbox token and vault secret).
func LoadKeyring(path string) (*Keyring, error) {
	key, err := readKeyFile(path)
	if errors.Is(err, os.ErrNotExist) {
		err = fmt.Errorf("load keyring %s: no such file: copy the deployment's key file there, or create the first one with `cocoonbox admin keyring init --keyring %s`", path, path)
	}
	return keyring(path, key, err)
}

// CreateKeyring writes a new random master key to path, which must not exist: an existing key
// file is refused with an error naming it, since replacing a key would make every stored secret
// unreadable.
func CreateKeyring(path string) (*Keyring, error) {
	key, err := createKeyFile(path)
	if errors.Is(err, os.ErrExist) {
		err = fmt.Errorf("create keyring %s: the file exists; a deployment keeps its key (remove the file first only if nothing was ever sealed with it)", path)
	}
	return keyring(path, key, err)
}

// keyring is the keyring of key read from path, or err.
func keyring(path string, key []byte, err error) (*Keyring, error) {
	if err != nil {
		return nil, err
	}
	k, err := NewKeyring(key)
	if err != nil {
		return nil, fmt.Errorf("load keyring %s: %w", path, err)
	}
	return k, nil
}

// readKeyFile returns the key in path. A missing file is reported as the bare os error, so the
// caller can tell it apart with errors.Is(err, os.ErrNotExist) and create the file.
func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("load keyring: %w", err)
	}
	defer f.Close()
	// Checked on the open file, not the path, so what is checked is what is read.
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load keyring: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("load keyring %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("load keyring %s: mode %04o lets group or others read the master key; want 0600 (chmod 600 %s)", path, perm, path)
	}
	if fi.Size() != KeySize {
		return nil, fmt.Errorf("load keyring %s: %d bytes, want a %d-byte key", path, fi.Size(), KeySize)
	}
	key := make([]byte, KeySize)
	if _, err := io.ReadFull(f, key); err != nil {
		return nil, fmt.Errorf("load keyring %s: %w", path, err)
	}
	return key, nil
}

// createKeyFile writes a new key to path. The key is written and synced to a temporary file that
// is then hard-linked into place, so a reader never sees a partial key and, when two processes
// start together, the first link wins; the other gets an error wrapping os.ErrExist.
func createKeyFile(path string) ([]byte, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("create keyring %s: %w", path, err)
	}
	if err := writeKeyFile(path, key); err != nil {
		return nil, err
	}
	return key, nil
}

// writeKeyFile writes key to path, which must not exist (an error wrapping os.ErrExist), as
// createKeyFile says.
func writeKeyFile(path string, key []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create keyring %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, ".keyring-*")
	if err != nil {
		return fmt.Errorf("create keyring %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600; the explicit Chmod keeps that true whatever it does later.
	err = errors.Join(tmp.Chmod(0o600), write(tmp, key), tmp.Sync(), tmp.Close())
	if err != nil {
		return fmt.Errorf("create keyring %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		return fmt.Errorf("create keyring %s: %w", path, err)
	}
	// Secrets sealed with this key will soon be in the database; the key must survive a crash.
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("create keyring %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func write(f *os.File, b []byte) error {
	_, err := f.Write(b)
	return err
}
