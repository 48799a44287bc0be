package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SealedKind names a column of values sealed under the keyring.
type SealedKind string

// The sealed columns: a box's sandbox token, a vault secret's wrapped data key, a webhook's
// signing secret.
const (
	SealedSandboxToken  SealedKind = "sandbox-token"
	SealedSecret        SealedKind = "secret"
	SealedWebhookSecret SealedKind = "webhook-secret"
)

// SealedKinds are every sealed column, in the order a re-seal goes through them.
var SealedKinds = []SealedKind{SealedSandboxToken, SealedSecret, SealedWebhookSecret}

// Sealed is one sealed value: its column, the row it is on (a box ID, a secret's "owner/name", a
// webhook ID) and its blob.
type Sealed struct {
	Kind SealedKind
	Row  string
	Blob []byte
}

// sealedQueries are each column's listing of blobs that do not begin with a prefix ($1), and
// its compare-and-swap of one blob ($1 the row, $2 the blob read, $3 the new blob), with the new
// blob's key ID as $4 where the table records it.
var sealedQueries = map[SealedKind]struct {
	stale, replace string
	keyID          bool
}{
	SealedSandboxToken: {
		stale: `SELECT id, sandbox_token_ciphertext FROM boxes
		  WHERE sandbox_token_ciphertext IS NOT NULL AND substring(sandbox_token_ciphertext FROM 1 FOR length($1::bytea)) <> $1::bytea
		  ORDER BY id LIMIT $2`,
		replace: `UPDATE boxes SET sandbox_token_ciphertext = $3 WHERE id = $1 AND sandbox_token_ciphertext = $2`,
	},
	SealedSecret: {
		stale: `SELECT owner_id || '/' || name, wrapped_key FROM secrets
		  WHERE substring(wrapped_key FROM 1 FOR length($1::bytea)) <> $1::bytea
		  ORDER BY id LIMIT $2`,
		replace: `UPDATE secrets SET wrapped_key = $3, key_id = $4 WHERE owner_id || '/' || name = $1 AND wrapped_key = $2`,
		keyID:   true,
	},
	SealedWebhookSecret: {
		stale: `SELECT id, secret_sealed FROM webhooks
		  WHERE substring(secret_sealed FROM 1 FOR length($1::bytea)) <> $1::bytea
		  ORDER BY id LIMIT $2`,
		replace: `UPDATE webhooks SET secret_sealed = $3 WHERE id = $1 AND secret_sealed = $2`,
	},
}

// StaleSealed returns up to limit values of kind's column whose blob does not begin with prefix
// (secrets.Keyring.PrimaryPrefix): those sealed with a key other than the primary.
func (q *Queries) StaleSealed(ctx context.Context, kind SealedKind, prefix []byte, limit int) ([]Sealed, error) {
	sq, ok := sealedQueries[kind]
	if !ok {
		return nil, fmt.Errorf("stale sealed values: %w: no sealed column %q", ErrInvalid, kind)
	}
	rows, err := q.db.Query(ctx, sq.stale, prefix, limit)
	if err != nil {
		return nil, fmt.Errorf("stale sealed %s values: %w", kind, mapErr(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Sealed, error) {
		s := Sealed{Kind: kind}
		return s, r.Scan(&s.Row, &s.Blob)
	})
	if err != nil {
		return nil, fmt.Errorf("stale sealed %s values: %w", kind, mapErr(err))
	}
	return out, nil
}

// ReplaceSealed puts blob, sealed with key keyID, in place of s's blob, only if the row still
// holds s.Blob: a value written meanwhile (a new sandbox's token) is newer than the re-seal and
// stays. It reports whether it replaced.
func (q *Queries) ReplaceSealed(ctx context.Context, s Sealed, blob []byte, keyID string) (bool, error) {
	sq, ok := sealedQueries[s.Kind]
	if !ok {
		return false, fmt.Errorf("replace a sealed value: %w: no sealed column %q", ErrInvalid, s.Kind)
	}
	args := []any{s.Row, s.Blob, blob}
	if sq.keyID {
		args = append(args, keyID)
	}
	tag, err := q.db.Exec(ctx, sq.replace, args...)
	if err != nil {
		return false, fmt.Errorf("replace sealed %s of %s: %w", s.Kind, s.Row, mapErr(err))
	}
	return tag.RowsAffected() == 1, nil
}
