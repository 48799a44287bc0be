package devstack

import "github.com/loomhand/cocoonbox/internal/secrets"

// DatabaseURL is the store's URL, for tests that run a worker in a child process.
func DatabaseURL(d *Dev) string { return d.databaseURL() }

// Keyring is the stack's master keyring, for the secret scan to unseal and derive what the
// stack's activities did.
func Keyring(d *Dev) *secrets.Keyring { return d.keys }
