package store

import (
	"context"
	"fmt"
	"time"
)

// SpendTicket records that the one-time ticket id (valid until expires) was used, and says
// whether this was its first use. Rows of tickets expired for five minutes are deleted on the
// way: an expired ticket is refused before it is spent, so its row no longer protects anything
// (the margin covers the API's clock being behind the database's).
func (q *Queries) SpendTicket(ctx context.Context, id string, expires time.Time) (bool, error) {
	if _, err := q.db.Exec(ctx, `DELETE FROM spent_tickets WHERE expires_at < now() - interval '5 minutes'`); err != nil {
		return false, fmt.Errorf("spend ticket: %w", mapErr(err))
	}
	tag, err := q.db.Exec(ctx,
		`INSERT INTO spent_tickets (id, expires_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, id, expires)
	if err != nil {
		return false, fmt.Errorf("spend ticket: %w", mapErr(err))
	}
	return tag.RowsAffected() == 1, nil
}

// UnspendTicket makes ticket id usable again, for a use that SpendTicket recorded and that
// then failed before it opened anything.
func (q *Queries) UnspendTicket(ctx context.Context, id string) error {
	if _, err := q.db.Exec(ctx, `DELETE FROM spent_tickets WHERE id = $1`, id); err != nil {
		return fmt.Errorf("unspend ticket: %w", mapErr(err))
	}
	return nil
}
