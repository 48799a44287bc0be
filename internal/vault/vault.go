// Package vault keeps users' named secrets (API keys and the like, handed to their boxes and
// agent runs) encrypted at rest with envelope encryption, so that neither a copy of the database
// nor a copy of the master key alone reveals a value, and the master key can be rotated by
// rewrapping small data keys rather than re-encrypting every value.
//
// Each value is encrypted with AES-256-GCM under its own random data key; the data key is sealed
// by the master keyring (package secrets). Both layers authenticate the owner and the name, so a
// row copied to another owner or name fails to open. Values are write-only through the API: only
// Open returns one, for the activities that hand it to a box. No error here ever contains a value.
package vault

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	"regexp"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
)

// MaxValue is the largest value Set accepts, in bytes: enough for any credential or key file,
// and the most the keyring would seal.
const MaxValue = secrets.MaxPlaintext

// dataKeySize is the length of a per-secret data key (AES-256).
const dataKeySize = 32

// namePattern is what a secret name looks like: an environment variable name, which is how a box
// receives it. The secrets table checks the same pattern.
var namePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// Vault stores and opens users' named secrets.
type Vault struct {
	Store *store.Store
	Keys  *secrets.Keyring
}

// Info describes a stored secret without its value.
type Info struct {
	Name      string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Set stores value as ownerID's secret called name, replacing any earlier value (the secret keeps
// its creation time). A malformed name or an empty or oversized value is a *cocoonbox.Error with
// code invalid naming the field; an unknown owner matches store.ErrNotFound.
func (v *Vault) Set(ctx context.Context, ownerID, name, value string) (Info, error) {
	if err := validateName(name); err != nil {
		return Info{}, fmt.Errorf("set secret: %w", err)
	}
	switch {
	case value == "":
		return Info{}, fmt.Errorf("set secret %s: %w", name, cocoonbox.Invalid("value", "is required"))
	case len(value) > MaxValue:
		return Info{}, fmt.Errorf("set secret %s: %w", name, cocoonbox.Invalid("value",
			fmt.Sprintf("is %d bytes, more than the %d allowed", len(value), MaxValue)))
	}
	row, err := v.seal(ownerID, name, []byte(value))
	if err != nil {
		return Info{}, fmt.Errorf("set secret %s: %w", name, err)
	}
	row, err = v.Store.PutSecret(ctx, row)
	if err != nil {
		return Info{}, fmt.Errorf("set secret: %w", err)
	}
	return info(row), nil
}

// Open returns ownerID's secret called name in clear, for the activity that hands it to a box; it
// must go nowhere else (no logs, no workflow payloads). A secret that does not exist matches
// store.ErrNotFound; a row that fails to open (tampered with, copied from another owner or name,
// or sealed under a master key this keyring lacks) matches secrets.ErrAuth or
// secrets.ErrUnknownKey.
func (v *Vault) Open(ctx context.Context, ownerID, name string) (string, error) {
	if err := validateName(name); err != nil {
		return "", fmt.Errorf("open secret: %w", err)
	}
	row, err := v.Store.SecretByName(ctx, ownerID, name)
	if err != nil {
		return "", fmt.Errorf("open secret: %w", err)
	}
	plain, err := v.open(row)
	if err != nil {
		return "", fmt.Errorf("open secret %s of %s: %w", name, ownerID, err)
	}
	return string(plain), nil
}

// List describes ownerID's secrets in name order, without their values; none is an empty list.
func (v *Vault) List(ctx context.Context, ownerID string) ([]Info, error) {
	rows, err := v.Store.ListSecrets(ctx, ownerID)
	if err != nil {
		return nil, err
	}
	list := make([]Info, len(rows))
	for i, r := range rows {
		list[i] = info(r)
	}
	return list, nil
}

// Delete removes ownerID's secret called name. One that does not exist matches store.ErrNotFound;
// a malformed name is a *cocoonbox.Error naming the field.
func (v *Vault) Delete(ctx context.Context, ownerID, name string) error {
	if err := validateName(name); err != nil {
		return fmt.Errorf("delete secret: %w", err)
	}
	return v.Store.DeleteSecret(ctx, ownerID, name)
}

func validateName(name string) error {
	if !namePattern.MatchString(name) {
		if len(name) > 140 {
			name = name[:140] + "…"
		}
		return cocoonbox.Invalid("name", fmt.Sprintf(
			"must be a letter or underscore followed by up to 127 letters, digits or underscores, got %q", name))
	}
	return nil
}

// AAD binds both encryption layers to the secret's owner and name. Names never contain '/', so
// the string is unambiguous.
func AAD(ownerID, name string) []byte {
	return []byte("vault:" + ownerID + "/" + name)
}

// seal encrypts plain under a fresh data key and wraps the data key with the keyring.
func (v *Vault) seal(ownerID, name string, plain []byte) (store.SecretRow, error) {
	key := make([]byte, dataKeySize)
	defer clear(key)
	rand.Read(key) // never fails: crypto/rand panics rather than return an error since Go 1.24
	gcm, err := newGCM(key)
	if err != nil {
		return store.SecretRow{}, err
	}
	ad := AAD(ownerID, name)
	nonce := make([]byte, gcm.NonceSize())
	rand.Read(nonce) // random 96-bit nonces are safe: each data key encrypts one value
	wrapped, err := v.Keys.Seal(key, ad)
	if err != nil {
		return store.SecretRow{}, fmt.Errorf("wrap data key: %w", err)
	}
	return store.SecretRow{
		OwnerID:    ownerID,
		Name:       name,
		Ciphertext: gcm.Seal(nil, nonce, plain, ad),
		Nonce:      nonce,
		WrappedKey: wrapped,
		KeyID:      v.Keys.KeyID(),
	}, nil
}

// open unwraps row's data key and decrypts its value, both under the AAD of the row's own owner
// and name as the caller asked for them.
func (v *Vault) open(row store.SecretRow) ([]byte, error) {
	ad := AAD(row.OwnerID, row.Name)
	key, err := v.Keys.Open(row.WrappedKey, ad)
	if err != nil {
		return nil, fmt.Errorf("unwrap data key: %w", err)
	}
	defer clear(key)
	if len(key) != dataKeySize {
		return nil, fmt.Errorf("unwrap data key: %w: %d bytes", secrets.ErrMalformed, len(key))
	}
	gcm, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	if len(row.Nonce) != gcm.NonceSize() {
		return nil, fmt.Errorf("decrypt value: %w: nonce is %d bytes", secrets.ErrMalformed, len(row.Nonce))
	}
	plain, err := gcm.Open(nil, row.Nonce, row.Ciphertext, ad)
	if err != nil {
		return nil, fmt.Errorf("decrypt value: %w", secrets.ErrAuth)
	}
	return plain, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("data key: %w", err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("data key: %w", err)
	}
	return gcm, nil
}

func info(r store.SecretRow) Info {
	return Info{Name: r.Name, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}
