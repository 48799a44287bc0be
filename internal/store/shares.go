package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/loomhand/cocoonbox"
)

// Share is a grant of a role on a box to a user other than its owner.
type Share struct {
	BoxID     cocoonbox.BoxID
	UserID    string
	UserName  string
	Role      cocoonbox.Role
	ExpiresAt *time.Time // nil: until unshared
	CreatedAt time.Time
}

// activeShare is the SQL condition for a share that has not expired, on a table aliased s. The
// database's clock decides, so every API replica agrees on when a share ends.
const activeShare = `(s.expires_at IS NULL OR s.expires_at > now())`

// putShare grants the share only on a live box, to someone other than its owner, expiring in the
// future; when it inserts nothing, whyNoShare says which condition failed. A re-share replaces
// the old grant entirely, created_at included: it is a new grant, not an edit of the old one.
const putShare = `
WITH s AS (
    INSERT INTO shares (box_id, user_id, role, expires_at)
    SELECT b.id, $2, $3, $4 FROM boxes b
    WHERE b.id = $1 AND b.deleted_at IS NULL AND b.owner_id <> $2
      AND ($4::timestamptz IS NULL OR $4::timestamptz > now())
    ON CONFLICT (box_id, user_id) DO UPDATE
        SET role = excluded.role, expires_at = excluded.expires_at, created_at = now()
    RETURNING box_id, user_id, role, expires_at, created_at
)
SELECT s.box_id, s.user_id, u.name, s.role, s.expires_at, s.created_at
FROM s JOIN users u ON u.id = s.user_id`

func (s *Share) fields() []any {
	return []any{&s.BoxID, &s.UserID, &s.UserName, &s.Role, &s.ExpiresAt, &s.CreatedAt}
}

// PutShare grants userID role on box boxID until expiresAt (nil: until unshared), replacing any
// earlier share of that box with that user. A role that cannot be shared, an expiry that is not
// in the future, or the box's own owner is ErrInvalid, also matching the *cocoonbox.Error naming
// the field (role, expires_at, user); an unknown or deleted box, or an unknown user, is ErrNotFound.
func (q *Queries) PutShare(ctx context.Context, boxID cocoonbox.BoxID, userID string, role cocoonbox.Role, expiresAt *time.Time) (Share, error) {
	if err := role.Validate(); err != nil {
		return Share{}, fmt.Errorf("share box %s with %s: %w: %w", boxID, userID, err, ErrInvalid)
	}
	var s Share
	err := q.db.QueryRow(ctx, putShare, boxID, userID, role, expiresAt).Scan(s.fields()...)
	if err == nil {
		return s, nil
	}
	// No row and a missing user both come back as ErrNotFound; whyNoShare looks at the rows.
	if err = mapErr(err); errors.Is(err, ErrNotFound) {
		err = q.whyNoShare(ctx, boxID, userID, expiresAt)
	}
	return Share{}, fmt.Errorf("share box %s with %s: %w", boxID, userID, err)
}

// whyNoShare explains a PutShare that wrote nothing: the box is unknown or deleted, or the user
// unknown (ErrNotFound); the expiry has passed, or the user owns the box (ErrInvalid).
func (q *Queries) whyNoShare(ctx context.Context, boxID cocoonbox.BoxID, userID string, expiresAt *time.Time) error {
	var isOwner, expired, userExists bool
	err := q.db.QueryRow(ctx,
		`SELECT owner_id = $2, coalesce($3::timestamptz <= now(), false),
		        EXISTS (SELECT 1 FROM users WHERE id = $2)
		 FROM boxes WHERE id = $1 AND deleted_at IS NULL`, boxID, userID, expiresAt,
	).Scan(&isOwner, &expired, &userExists)
	switch {
	case err != nil:
		return fmt.Errorf("box %s: %w", boxID, mapErr(err))
	case expired:
		return fmt.Errorf("%w: %w", cocoonbox.Invalid("expires_at", "must be in the future"), ErrInvalid)
	case isOwner:
		return fmt.Errorf("%w: %w", cocoonbox.Invalid("user", "owns the box and needs no share"), ErrInvalid)
	case !userExists:
		return fmt.Errorf("user %s: %w", userID, ErrNotFound)
	}
	return fmt.Errorf("box %s changed concurrently", boxID)
}

// DeleteShare removes userID's share of box boxID, expired or not. No share at all is ErrNotFound.
func (q *Queries) DeleteShare(ctx context.Context, boxID cocoonbox.BoxID, userID string) error {
	tag, err := q.db.Exec(ctx, `DELETE FROM shares WHERE box_id = $1 AND user_id = $2`, boxID, userID)
	if err != nil {
		return fmt.Errorf("unshare box %s with %s: %w", boxID, userID, mapErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("unshare box %s with %s: %w", boxID, userID, ErrNotFound)
	}
	return nil
}

// ShareRole returns the role userID holds on box boxID through a share that has not expired, or
// ErrNotFound. It knows nothing of ownership: callers check the box's owner first.
func (q *Queries) ShareRole(ctx context.Context, boxID cocoonbox.BoxID, userID string) (cocoonbox.Role, error) {
	var role cocoonbox.Role
	err := q.db.QueryRow(ctx,
		`SELECT s.role FROM shares s WHERE s.box_id = $1 AND s.user_id = $2 AND `+activeShare,
		boxID, userID).Scan(&role)
	if err != nil {
		return "", fmt.Errorf("share of box %s with %s: %w", boxID, userID, mapErr(err))
	}
	return role, nil
}

// ListShares returns box boxID's shares that have not expired, oldest first; none is an empty
// list, not an error.
func (q *Queries) ListShares(ctx context.Context, boxID cocoonbox.BoxID) ([]Share, error) {
	rows, err := q.db.Query(ctx,
		`SELECT s.box_id, s.user_id, u.name, s.role, s.expires_at, s.created_at
		 FROM shares s JOIN users u ON u.id = s.user_id
		 WHERE s.box_id = $1 AND `+activeShare+`
		 ORDER BY s.created_at, s.user_id`, boxID)
	if err != nil {
		return nil, fmt.Errorf("list shares of box %s: %w", boxID, mapErr(err))
	}
	defer rows.Close()
	shares := []Share{}
	for rows.Next() {
		var s Share
		if err := rows.Scan(s.fields()...); err != nil {
			return nil, fmt.Errorf("list shares of box %s: %w", boxID, mapErr(err))
		}
		shares = append(shares, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list shares of box %s: %w", boxID, mapErr(err))
	}
	return shares, nil
}
