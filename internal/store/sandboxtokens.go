package store

import (
	"context"
	"fmt"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
)

// SandboxTokens stores sandbox tokens encrypted (box IDs are plain strings here because that is
// the shape the activities' token interface takes): the database holds only ciphertexts, bound to
// their box, and a token is in clear only in the activity that asks for it. Workflows pass box IDs,
// never tokens, so no token lands in Temporal history.
type SandboxTokens struct {
	Store *Store
	Keys  *secrets.Keyring
}

// SandboxTokenAAD binds a sealed token to its box, so a ciphertext copied onto another box's row
// does not open.
func SandboxTokenAAD(boxID string) []byte {
	return []byte("sandbox-token:" + boxID)
}

// PutSandboxToken seals ref's token and stores it as box boxID's credential for ref's sandbox,
// with where it is (ref.Addr, ref.Node), replacing any earlier one. Errors are
// SetSandboxToken's.
func (s SandboxTokens) PutSandboxToken(ctx context.Context, boxID string, ref sandbox.SandboxRef) error {
	if ref.Token == "" {
		return fmt.Errorf("put sandbox token of box %s: %w: token is empty", boxID, ErrInvalid)
	}
	blob, err := s.Keys.Seal([]byte(ref.Token), SandboxTokenAAD(boxID))
	if err != nil {
		return fmt.Errorf("put sandbox token of box %s: %w", boxID, err)
	}
	return s.Store.SetSandboxToken(ctx, cocoonbox.BoxID(boxID), ref.ID, ref.Addr, ref.Node, blob)
}

// SandboxToken returns box boxID's sandbox: its ID, where it is (Store.SandboxToken) and its
// token in clear. No token is ErrNotFound; a ciphertext that does not open (another master key, a row
// tampered with or copied from another box) is an error matching secrets.ErrAuth or
// secrets.ErrUnknownKey.
func (s SandboxTokens) SandboxToken(ctx context.Context, boxID string) (sandbox.SandboxRef, error) {
	loc, blob, err := s.Store.SandboxToken(ctx, cocoonbox.BoxID(boxID))
	if err != nil {
		return sandbox.SandboxRef{}, err
	}
	plain, err := s.Keys.Open(blob, SandboxTokenAAD(boxID))
	if err != nil {
		return sandbox.SandboxRef{}, fmt.Errorf("sandbox token of box %s: %w", boxID, err)
	}
	return sandbox.SandboxRef{ID: loc.SandboxID, Token: string(plain), Addr: loc.Addr, Node: loc.Node}, nil
}
