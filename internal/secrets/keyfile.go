package secrets

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// LoadOrCreateKeyring returns the keyring whose master keys are in the file at path, creating the
// file with a new random key on first use. The file holds KeySize raw bytes per key, the primary
// first (RotateKeyring puts a new one there), and must be readable by this user only: a key file
// that group or others can read, or of a length that is no whole number of keys, is refused with
// an error naming the path rather than used or replaced, since replacing a key would make every
// stored secret unreadable.
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

// keyring is the keyring of the keys read from path, or err.
func keyring(path string, keys []byte, err error) (*Keyring, error) {
	if err != nil {
		return nil, err
	}
	k, err := NewKeyringOf(splitKeys(keys))
	if err != nil {
		return nil, fmt.Errorf("load keyring %s: %w", path, err)
	}
	return k, nil
}

// splitKeys cuts a key file's bytes into its keys.
func splitKeys(b []byte) [][]byte {
	var keys [][]byte
	for len(b) >= KeySize {
		keys = append(keys, b[:KeySize])
		b = b[KeySize:]
	}
	return keys
}

// RotateKeyring puts a new random key first in the key file at path, as its primary: what is
// sealed from now on is sealed with it, and the older keys stay in the file to open what they
// sealed until it is sealed again (the worker's re-sealing does that in the background). The
// file is replaced whole (a new file renamed over it), so a reader sees the old keys or the new
// list, never part of one. Run it on one host and copy the file to the others.
func RotateKeyring(path string) (*Keyring, error) {
	old, err := readKeyFile(path)
	if errors.Is(err, os.ErrNotExist) {
		err = fmt.Errorf("rotate keyring %s: no such file; create the first key with `cocoonbox admin keyring init`", path)
	}
	if err != nil {
		return nil, err
	}
	if len(old)/KeySize >= MaxKeys {
		return nil, fmt.Errorf("rotate keyring %s: it holds %d keys, the most a keyring may; the oldest must go first", path, MaxKeys)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("rotate keyring %s: %w", path, err)
	}
	keys := append(key, old...)
	k, err := keyring(path, keys, nil)
	if err != nil {
		return nil, err
	}
	if err := replaceKeyFile(path, keys); err != nil {
		return nil, err
	}
	return k, nil
}

// readKeyFile returns the keys in path. A missing file is reported as the bare os error, so the
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
	if n := fi.Size(); n == 0 || n%KeySize != 0 || n > MaxKeys*KeySize {
		return nil, fmt.Errorf("load keyring %s: %d bytes, want 1 to %d keys of %d bytes", path, n, MaxKeys, KeySize)
	}
	keys := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, keys); err != nil {
		return nil, fmt.Errorf("load keyring %s: %w", path, err)
	}
	return keys, nil
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

// replaceKeyFile writes keys to path in place of what it holds: a new file, synced, renamed
// over it.
func replaceKeyFile(path string, keys []byte) error {
	return putKeyFile(path, keys, os.Rename)
}

// writeKeyFile writes key to path, which must not exist (an error wrapping os.ErrExist), as
// createKeyFile says.
func writeKeyFile(path string, key []byte) error {
	return putKeyFile(path, key, os.Link)
}

// putKeyFile writes keys to a new file beside path, synced, and puts it at path with place
// (os.Link: only if path does not exist; os.Rename: in place of what is there).
func putKeyFile(path string, key []byte, place func(oldname, newname string) error) error {
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
	if err := place(tmp.Name(), path); err != nil {
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
