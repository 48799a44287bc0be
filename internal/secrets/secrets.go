// Package secrets encrypts the small secrets cocoonbox keeps at rest — sandbox tokens and users'
// named secrets — so that a copy of the database alone reveals none of them. It uses AES-256-GCM
// from the standard library with a master key kept outside the database, in a file only this
// process may read.
//
// Every sealed blob names the key that sealed it, so the master key can be rotated later by adding
// a key rather than re-encrypting everything at once. Every blob is also bound to what it belongs
// to through additional authenticated data (AAD): a ciphertext copied onto another box's or
// another owner's row fails to open instead of decrypting under the wrong name.
//
// This package imports nothing internal, so any package (the store included) may use it.
package secrets

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// KeySize is the length of a master key in bytes (AES-256).
const KeySize = 32

// MaxPlaintext bounds what Seal accepts: this is for tokens and API keys, not files, and a bound
// keeps a mistaken caller from encrypting megabytes into a database row.
const MaxPlaintext = 64 << 10

// Blob layout: version (1 byte) | key ID (4 bytes) | nonce (12 bytes) | ciphertext and GCM tag.
// The header is authenticated together with the caller's AAD, so no byte of a blob can change
// without Open failing.
const (
	blobVersion = 1
	keyIDSize   = 4
	nonceSize   = 12
	headerSize  = 1 + keyIDSize + nonceSize
	tagSize     = 16
)

// Overhead is how many bytes Seal adds to a plaintext.
const Overhead = headerSize + tagSize

var (
	// ErrMalformed means a blob is too short or of an unknown version: it was not made by Seal.
	ErrMalformed = errors.New("malformed sealed blob")
	// ErrUnknownKey means a blob was sealed with a key this keyring does not hold.
	ErrUnknownKey = errors.New("sealed with an unknown key")
	// ErrAuth means a blob failed authentication: it was tampered with, or the AAD differs from
	// the one it was sealed with (it belongs to another box, owner or name).
	ErrAuth = errors.New("authentication failed: wrong AAD or tampered blob")
)

// Keyring holds the master keys: the primary seals, any of them opens. It is safe for
// concurrent use.
type Keyring struct {
	primary [keyIDSize]byte
	aeads   map[[keyIDSize]byte]cipher.AEAD
	derive  [32]byte // the oldest key's derivation key, for Derive
}

// MaxKeys bounds how many keys one keyring holds: the primary and the older ones kept to open
// what they sealed until it is sealed again.
const MaxKeys = 16

// NewKeyring returns a keyring whose primary key is key, which must be KeySize random bytes.
func NewKeyring(key []byte) (*Keyring, error) {
	return NewKeyringOf([][]byte{key})
}

// NewKeyringOf returns a keyring of keys, newest first: the first is the primary, which seals;
// every one opens what it sealed. Derive uses the last, the deployment's first key, so rotating
// the sealing key leaves derived keys (boxes' agent credentials) as they were.
func NewKeyringOf(keys [][]byte) (*Keyring, error) {
	if len(keys) == 0 || len(keys) > MaxKeys {
		return nil, fmt.Errorf("new keyring: %d keys, want 1 to %d", len(keys), MaxKeys)
	}
	k := &Keyring{aeads: map[[keyIDSize]byte]cipher.AEAD{}}
	for i, key := range keys {
		if len(key) != KeySize {
			return nil, fmt.Errorf("new keyring: key %d is %d bytes, want %d", i+1, len(key), KeySize)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("new keyring: %w", err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("new keyring: %w", err)
		}
		id := keyID(key)
		if _, dup := k.aeads[id]; dup {
			return nil, fmt.Errorf("new keyring: key %d repeats key %x", i+1, id)
		}
		k.aeads[id] = aead
		if i == 0 {
			k.primary = id
		}
	}
	m := hmac.New(sha256.New, keys[len(keys)-1])
	m.Write([]byte("cocoonbox secrets derive\x00"))
	copy(k.derive[:], m.Sum(nil))
	return k, nil
}

// Derive returns a 32-byte key for purpose (e.g. "agent-credential"), the same on every process
// holding the same keyring and unrelated to the keys used for sealing or to other purposes. It
// comes from the keyring's oldest key, which rotation keeps, so a rotation changes no derived key.
func (k *Keyring) Derive(purpose string) []byte {
	m := hmac.New(sha256.New, k.derive[:])
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// keyID derives a key's ID from the key, so the key file needs no second field and the same key
// always has the same ID. Four bytes of a domain-separated SHA-256 tell keys apart without
// saying anything useful about a 256-bit random key.
func keyID(key []byte) [keyIDSize]byte {
	h := sha256.New()
	h.Write([]byte("cocoonbox secrets key id\x00"))
	h.Write(key)
	var id [keyIDSize]byte
	copy(id[:], h.Sum(nil))
	return id
}

// KeyID returns the primary key's ID in hex, for logs and for the key_id column of stored
// secrets; it reveals nothing about the key.
func (k *Keyring) KeyID() string { return hex.EncodeToString(k.primary[:]) }

// KeyCount is how many keys the keyring holds, the primary included.
func (k *Keyring) KeyCount() int { return len(k.aeads) }

// PrimaryPrefix is how every blob the primary key seals begins (its version and key ID), so a
// store can find the blobs sealed with another key: those a rotation left to seal again.
func (k *Keyring) PrimaryPrefix() []byte { return append([]byte{blobVersion}, k.primary[:]...) }

// SealedWithPrimary reports whether blob was sealed with the primary key.
func (k *Keyring) SealedWithPrimary(blob []byte) bool {
	return len(blob) >= headerSize && bytes.Equal(blob[:1+keyIDSize], k.PrimaryPrefix())
}

// Seal encrypts plaintext with the primary key and a fresh random nonce, binding it to aad, and
// returns a self-describing blob for Open. aad should name what the secret belongs to, such as
// "sandbox-token:"+boxID or "secret:"+owner+"/"+name; it is not stored in the blob.
func (k *Keyring) Seal(plaintext, aad []byte) ([]byte, error) {
	if len(plaintext) > MaxPlaintext {
		return nil, fmt.Errorf("seal secret: %d bytes, more than the %d allowed", len(plaintext), MaxPlaintext)
	}
	blob := make([]byte, headerSize, headerSize+len(plaintext)+tagSize)
	blob[0] = blobVersion
	copy(blob[1:], k.primary[:])
	nonce := blob[1+keyIDSize : headerSize]
	// Random 96-bit nonces are safe far beyond the number of secrets one key will ever seal.
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal secret: %w", err)
	}
	return k.aeads[k.primary].Seal(blob, nonce, plaintext, additional(blob[:headerSize], aad)), nil
}

// Open authenticates and decrypts a blob made by Seal with the same aad. A blob from elsewhere is
// ErrMalformed, one sealed with a key not in the keyring ErrUnknownKey, and a tampered blob or a
// different aad ErrAuth.
func (k *Keyring) Open(blob, aad []byte) ([]byte, error) {
	if len(blob) < Overhead {
		return nil, fmt.Errorf("open secret: %w: %d bytes, shorter than the %d-byte minimum", ErrMalformed, len(blob), Overhead)
	}
	if blob[0] != blobVersion {
		return nil, fmt.Errorf("open secret: %w: version %d, want %d", ErrMalformed, blob[0], blobVersion)
	}
	var id [keyIDSize]byte
	copy(id[:], blob[1:])
	aead, ok := k.aeads[id]
	if !ok {
		return nil, fmt.Errorf("open secret: %w %x", ErrUnknownKey, id)
	}
	header := blob[:headerSize]
	plaintext, err := aead.Open(nil, header[1+keyIDSize:], blob[headerSize:], additional(header, aad))
	if err != nil {
		return nil, fmt.Errorf("open secret: %w", ErrAuth)
	}
	return plaintext, nil
}

// additional is the AAD given to GCM: the fixed-length header, then the caller's aad. The header
// has a fixed length, so the concatenation is unambiguous.
func additional(header, aad []byte) []byte {
	out := make([]byte, 0, len(header)+len(aad))
	return append(append(out, header...), aad...)
}
