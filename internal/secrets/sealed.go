package secrets

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"os"

	"golang.org/x/crypto/scrypt"
)

// A backup carries the keyring sealed with an operator's passphrase, so the backup's bucket alone
// opens nothing: the key is derived from the passphrase with scrypt (its recommended interactive
// cost, about 100 ms here) and seals the raw key with AES-256-GCM. The layout is
// sealedMagic | salt (16) | nonce (12) | ciphertext of the key file's keys with its tag.

const (
	sealedMagic = "cocoonbox-keyring-v1\n"
	saltSize    = 16
	scryptN     = 1 << 15
	scryptR     = 8
	scryptP     = 1
	// MinPassphrase is the shortest passphrase a keyring is sealed with.
	MinPassphrase = 12
)

// ErrPassphrase is the answer to a sealed keyring opened with the wrong passphrase (or a sealed
// file that was changed).
var ErrPassphrase = errors.New("the passphrase does not open this sealed keyring")

// SealKeyFile returns the key of the keyring file at path (checked as LoadKeyring checks it)
// sealed with passphrase, and the keyring it is.
func SealKeyFile(path string, passphrase []byte) ([]byte, *Keyring, error) {
	if len(passphrase) < MinPassphrase {
		return nil, nil, fmt.Errorf("seal keyring: the passphrase is %d bytes; use at least %d", len(passphrase), MinPassphrase)
	}
	key, err := readKeyFile(path)
	if errors.Is(err, os.ErrNotExist) {
		err = fmt.Errorf("seal keyring %s: no such file", path)
	}
	kr, err := keyring(path, key, err)
	if err != nil {
		return nil, nil, err
	}
	salt := make([]byte, saltSize)
	if _, err := rand.Read(salt); err != nil {
		return nil, nil, fmt.Errorf("seal keyring: %w", err)
	}
	aead, err := passphraseAEAD(passphrase, salt)
	if err != nil {
		return nil, nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, nil, fmt.Errorf("seal keyring: %w", err)
	}
	out := append([]byte(sealedMagic), salt...)
	out = append(out, nonce...)
	return aead.Seal(out, nonce, key, []byte(sealedMagic)), kr, nil
}

// RestoreKeyFile opens sealed with passphrase and writes the key to path, mode 0600, as
// CreateKeyring writes one. A file already at path holding the same key is left as it is; one
// holding another key is refused, since replacing a key makes what it sealed unreadable.
func RestoreKeyFile(path string, sealed, passphrase []byte) (*Keyring, error) {
	key, err := openSealed(sealed, passphrase)
	if err != nil {
		return nil, err
	}
	have, err := readKeyFile(path)
	switch {
	case err == nil && bytes.Equal(have, key):
		return NewKeyringOf(splitKeys(key))
	case err == nil:
		return nil, fmt.Errorf("restore keyring %s: the file holds another key; move it away to restore the backup's", path)
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	if err := writeKeyFile(path, key); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("restore keyring %s: the file appeared meanwhile; run the restore again", path)
		}
		return nil, err
	}
	return NewKeyringOf(splitKeys(key))
}

// openSealed returns the key sealed holds.
func openSealed(sealed, passphrase []byte) ([]byte, error) {
	if !bytes.HasPrefix(sealed, []byte(sealedMagic)) || len(sealed) < len(sealedMagic)+saltSize {
		return nil, errors.New("open sealed keyring: not a sealed keyring (cocoonbox-keyring-v1)")
	}
	rest := sealed[len(sealedMagic):]
	aead, err := passphraseAEAD(passphrase, rest[:saltSize])
	if err != nil {
		return nil, err
	}
	rest = rest[saltSize:]
	if len(rest) < aead.NonceSize() {
		return nil, errors.New("open sealed keyring: the file is cut short")
	}
	key, err := aead.Open(nil, rest[:aead.NonceSize()], rest[aead.NonceSize():], []byte(sealedMagic))
	if err != nil {
		return nil, ErrPassphrase
	}
	if n := len(key); n == 0 || n%KeySize != 0 || n > MaxKeys*KeySize {
		return nil, fmt.Errorf("open sealed keyring: it holds %d bytes, want 1 to %d keys of %d bytes", n, MaxKeys, KeySize)
	}
	return key, nil
}

func passphraseAEAD(passphrase, salt []byte) (cipher.AEAD, error) {
	k, err := scrypt.Key(passphrase, salt, scryptN, scryptR, scryptP, 32)
	if err != nil {
		return nil, fmt.Errorf("derive the passphrase's key: %w", err)
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
