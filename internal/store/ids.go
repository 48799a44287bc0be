package store

import (
	"crypto/rand"
	"encoding/base32"
)

// lowerBase32 spells random bytes in lowercase letters and digits 2-7: easy to read aloud and
// to double-click, and matching the CHECK constraints on ID columns.
var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID returns prefix + "_" + 20 random characters (100 bits): collisions are not a concern.
func newID(prefix string) string {
	b := make([]byte, 13)
	rand.Read(b) // never fails: crypto/rand panics rather than return an error since Go 1.24
	return prefix + "_" + lowerBase32.EncodeToString(b)[:20]
}
