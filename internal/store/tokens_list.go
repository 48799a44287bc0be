package store

import (
	"context"
	"fmt"
)

// ListTokens returns all of userID's tokens, revoked and expired ones included, so a user can
// see what was issued and when it stopped working; newest first. None is an empty list, not an
// error.
func (q *Queries) ListTokens(ctx context.Context, userID string) ([]Token, error) {
	rows, err := q.db.Query(ctx,
		`SELECT `+tokenColumns+` FROM tokens WHERE user_id = $1 ORDER BY created_at DESC, id DESC`, userID)
	if err != nil {
		return nil, fmt.Errorf("list tokens of %s: %w", userID, mapErr(err))
	}
	defer rows.Close()
	tokens := []Token{}
	for rows.Next() {
		var t Token
		if err := rows.Scan(t.fields()...); err != nil {
			return nil, fmt.Errorf("list tokens of %s: %w", userID, mapErr(err))
		}
		tokens = append(tokens, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tokens of %s: %w", userID, mapErr(err))
	}
	return tokens, nil
}
