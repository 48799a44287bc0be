package store

import (
	"context"
	"fmt"
	"time"
)

// SecretRow is a user's named secret as stored: the value encrypted under its own data key, and
// that data key sealed by the master keyring. Only package vault makes and reads these; to the
// store they are opaque bytes.
type SecretRow struct {
	OwnerID    string
	Name       string
	Ciphertext []byte // the value, AES-256-GCM under the data key
	Nonce      []byte // 12 bytes, for Ciphertext
	WrappedKey []byte // the data key, sealed by the keyring
	KeyID      string // the keyring key that sealed WrappedKey, so a rotation can find the row
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

const secretColumns = `owner_id, name, ciphertext, nonce, wrapped_key, key_id, created_at, updated_at`

func (r *SecretRow) fields() []any {
	return []any{&r.OwnerID, &r.Name, &r.Ciphertext, &r.Nonce, &r.WrappedKey, &r.KeyID, &r.CreatedAt, &r.UpdatedAt}
}

// PutSecret stores r under its owner and name, replacing the stored value if there is one: the
// replacement keeps created_at and sets updated_at. It returns the row as stored (r's timestamps
// are ignored). An unknown owner is ErrNotFound; a malformed name or nonce, or an empty key ID or
// wrapped key, is ErrInvalid.
func (q *Queries) PutSecret(ctx context.Context, r SecretRow) (SecretRow, error) {
	var out SecretRow
	err := q.db.QueryRow(ctx,
		`INSERT INTO secrets (owner_id, name, ciphertext, nonce, wrapped_key, key_id)
		 VALUES ($1, $2, $3, $4, $5, $6)
		 ON CONFLICT (owner_id, name) DO UPDATE SET
		     ciphertext = excluded.ciphertext, nonce = excluded.nonce,
		     wrapped_key = excluded.wrapped_key, key_id = excluded.key_id, updated_at = now()
		 RETURNING `+secretColumns,
		r.OwnerID, r.Name, r.Ciphertext, r.Nonce, r.WrappedKey, r.KeyID,
	).Scan(out.fields()...)
	if err != nil {
		return SecretRow{}, fmt.Errorf("put secret %q of %s: %w", r.Name, r.OwnerID, mapErr(err))
	}
	return out, nil
}

// SecretByName returns ownerID's secret called name, or ErrNotFound.
func (q *Queries) SecretByName(ctx context.Context, ownerID, name string) (SecretRow, error) {
	var r SecretRow
	err := q.db.QueryRow(ctx,
		`SELECT `+secretColumns+` FROM secrets WHERE owner_id = $1 AND name = $2`, ownerID, name,
	).Scan(r.fields()...)
	if err != nil {
		return SecretRow{}, fmt.Errorf("secret %q of %s: %w", name, ownerID, mapErr(err))
	}
	return r, nil
}

// ListSecrets returns ownerID's secrets in name order; none is an empty list, not an error.
func (q *Queries) ListSecrets(ctx context.Context, ownerID string) ([]SecretRow, error) {
	rows, err := q.db.Query(ctx,
		`SELECT `+secretColumns+` FROM secrets WHERE owner_id = $1 ORDER BY name`, ownerID)
	if err != nil {
		return nil, fmt.Errorf("list secrets of %s: %w", ownerID, mapErr(err))
	}
	defer rows.Close()
	list := []SecretRow{}
	for rows.Next() {
		var r SecretRow
		if err := rows.Scan(r.fields()...); err != nil {
			return nil, fmt.Errorf("list secrets of %s: %w", ownerID, mapErr(err))
		}
		list = append(list, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list secrets of %s: %w", ownerID, mapErr(err))
	}
	return list, nil
}

// DeleteSecret removes ownerID's secret called name; one that does not exist is ErrNotFound.
func (q *Queries) DeleteSecret(ctx context.Context, ownerID, name string) error {
	tag, err := q.db.Exec(ctx, `DELETE FROM secrets WHERE owner_id = $1 AND name = $2`, ownerID, name)
	if err != nil {
		return fmt.Errorf("delete secret %q of %s: %w", name, ownerID, mapErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete secret %q of %s: %w", name, ownerID, ErrNotFound)
	}
	return nil
}
