package store

import (
	"context"
	"fmt"

	"github.com/loomhand/cocoonbox"
)

// BoxAccess is a box together with the role a particular user holds on it.
type BoxAccess struct {
	Box
	Role cocoonbox.Role // cocoonbox.RoleOwner for the user's own boxes
}

// BoxByOwnerName returns ownerID's box called name that is not deleted, or ErrNotFound. Names
// are unique per owner only among live boxes, so this finds at most one.
func (q *Queries) BoxByOwnerName(ctx context.Context, ownerID, name string) (Box, error) {
	var b Box
	err := scanBox(q.db.QueryRow(ctx,
		`SELECT `+boxColumns+` FROM boxes WHERE owner_id = $1 AND name = $2 AND deleted_at IS NULL`,
		ownerID, name), &b)
	if err != nil {
		return Box{}, fmt.Errorf("box %q of %s: %w", name, ownerID, mapErr(err))
	}
	return b, nil
}

// boxesForUser joins each live box to the user's active share of it, if any (at most one: the
// share key is box and user), and keeps the boxes the user owns or holds a share on. Ownership
// wins over a share. The inner query names the columns boxColumns reads, so boxColumns applies
// to it unqualified.
const boxesForUser = `
SELECT ` + boxColumns + `, role FROM (
    SELECT b.id, b.owner_id, b.name, b.size, b.state, b.sandbox_id, b.last_error,
           b.created_at, b.updated_at, b.deleted_at, b.parent_id, b.forked_at,
           CASE WHEN b.owner_id = $1 THEN 'owner' ELSE s.role END AS role
    FROM boxes b
    LEFT JOIN shares s ON s.box_id = b.id AND s.user_id = $1 AND ` + activeShare + `
    WHERE b.deleted_at IS NULL AND (b.owner_id = $1 OR s.user_id IS NOT NULL)
) AS visible
ORDER BY created_at DESC, id DESC`

// ListBoxesForUser returns the boxes that are not deleted and that userID owns or holds an
// unexpired share on, each with the user's role, newest first; none is an empty list, not an
// error.
func (q *Queries) ListBoxesForUser(ctx context.Context, userID string) ([]BoxAccess, error) {
	rows, err := q.db.Query(ctx, boxesForUser, userID)
	if err != nil {
		return nil, fmt.Errorf("list boxes for %s: %w", userID, mapErr(err))
	}
	defer rows.Close()
	boxes := []BoxAccess{}
	for rows.Next() {
		var a BoxAccess
		// scanBox takes a Scan; this one adds the role after the box's columns.
		err := scanBox(scanFunc(func(dest ...any) error { return rows.Scan(append(dest, &a.Role)...) }), &a.Box)
		if err != nil {
			return nil, fmt.Errorf("list boxes for %s: %w", userID, mapErr(err))
		}
		boxes = append(boxes, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list boxes for %s: %w", userID, mapErr(err))
	}
	return boxes, nil
}

// scanFunc adapts a function to the row interface scanBox takes.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }
