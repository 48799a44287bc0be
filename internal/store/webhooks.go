package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loomhand/cocoonbox"
)

// Webhook is a user's registration for the events of their boxes.
type Webhook struct {
	ID           string
	UserID       string
	URL          string
	SecretSealed []byte
	Events       []string // patterns: box.*, run.*, or one action such as box.hibernated
	CreatedAt    time.Time
}

// Delivery is one attempt to deliver an event to a webhook.
type Delivery struct {
	ID        int64
	WebhookID string
	EventID   int64
	Action    string
	Attempt   int
	Status    int // the receiver's HTTP status; 0 when it gave none
	Error     string
	At        time.Time
}

// MaxWebhooks bounds one user's webhooks.
const MaxWebhooks = 20

// NewWebhookID returns a new webhook ID (wh_…), for sealing its secret before it is stored.
func NewWebhookID() string { return newID("wh") }

// CreateWebhook stores w (its ID from NewWebhookID), refusing a user's MaxWebhooks+1st.
func (q *Queries) CreateWebhook(ctx context.Context, w Webhook) (Webhook, error) {
	err := q.db.QueryRow(ctx, `INSERT INTO webhooks (id, user_id, url, secret_sealed, events)
		SELECT $1, $2, $3, $4, $5 WHERE (SELECT count(*) FROM webhooks WHERE user_id = $2) < $6
		RETURNING created_at`, w.ID, w.UserID, w.URL, w.SecretSealed, w.Events, MaxWebhooks).Scan(&w.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Webhook{}, cocoonbox.Errorf(cocoonbox.EResourceExhausted, "webhooks: at most %d per user; delete one first", MaxWebhooks)
	}
	if err != nil {
		return Webhook{}, fmt.Errorf("create webhook: %w", mapErr(err))
	}
	return w, nil
}

const webhookCols = `id, user_id, url, secret_sealed, events, created_at`

func scanWebhooks(op string, rows pgx.Rows) ([]Webhook, error) {
	defer rows.Close()
	var out []Webhook
	for rows.Next() {
		var w Webhook
		if err := rows.Scan(&w.ID, &w.UserID, &w.URL, &w.SecretSealed, &w.Events, &w.CreatedAt); err != nil {
			return nil, fmt.Errorf("%s: %w", op, mapErr(err))
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, mapErr(err))
	}
	return out, nil
}

// Webhooks returns the user's webhooks, oldest first.
func (q *Queries) Webhooks(ctx context.Context, userID string) ([]Webhook, error) {
	rows, err := q.db.Query(ctx, `SELECT `+webhookCols+` FROM webhooks WHERE user_id = $1 ORDER BY created_at, id`, userID)
	if err != nil {
		return nil, fmt.Errorf("webhooks: %w", mapErr(err))
	}
	return scanWebhooks("webhooks", rows)
}

// WebhookByID returns a webhook; ErrNotFound when it is gone.
func (q *Queries) WebhookByID(ctx context.Context, id string) (Webhook, error) {
	rows, err := q.db.Query(ctx, `SELECT `+webhookCols+` FROM webhooks WHERE id = $1`, id)
	if err != nil {
		return Webhook{}, fmt.Errorf("webhook %s: %w", id, mapErr(err))
	}
	hooks, err := scanWebhooks("webhook "+id, rows)
	if err != nil {
		return Webhook{}, err
	}
	if len(hooks) == 0 {
		return Webhook{}, fmt.Errorf("webhook %s: %w", id, ErrNotFound)
	}
	return hooks[0], nil
}

// DeleteWebhook removes the user's webhook and its delivery log; ErrNotFound when the user has
// no such webhook.
func (q *Queries) DeleteWebhook(ctx context.Context, userID, id string) error {
	tag, err := q.db.Exec(ctx, `DELETE FROM webhooks WHERE id = $1 AND user_id = $2`, id, userID)
	if err != nil {
		return fmt.Errorf("delete webhook: %w", mapErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete webhook %s: %w", id, ErrNotFound)
	}
	return nil
}

// AddDelivery records one delivery attempt.
func (q *Queries) AddDelivery(ctx context.Context, d Delivery) error {
	var status *int
	if d.Status != 0 {
		status = &d.Status
	}
	_, err := q.db.Exec(ctx, `INSERT INTO webhook_deliveries (webhook_id, event_id, action, attempt, status, error)
		VALUES ($1, $2, $3, $4, $5, $6)`, d.WebhookID, d.EventID, d.Action, d.Attempt, status, d.Error)
	if err != nil {
		return fmt.Errorf("record delivery: %w", mapErr(err))
	}
	return nil
}

// Deliveries returns the webhook's newest delivery attempts, newest first.
func (q *Queries) Deliveries(ctx context.Context, webhookID string, limit int) ([]Delivery, error) {
	rows, err := q.db.Query(ctx, `SELECT id, webhook_id, event_id, action, attempt, coalesce(status, 0), error, at
		FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY id DESC LIMIT $2`, webhookID, limit)
	if err != nil {
		return nil, fmt.Errorf("deliveries: %w", mapErr(err))
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		var d Delivery
		if err := rows.Scan(&d.ID, &d.WebhookID, &d.EventID, &d.Action, &d.Attempt, &d.Status, &d.Error, &d.At); err != nil {
			return nil, fmt.Errorf("deliveries: %w", mapErr(err))
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("deliveries: %w", mapErr(err))
	}
	return out, nil
}

// WebhookCursor is the newest event the dispatcher has dispatched. The first read places it at
// the newest event then, so a new deployment does not replay history; later reads write nothing.
func (q *Queries) WebhookCursor(ctx context.Context) (int64, error) {
	var id int64
	err := q.db.QueryRow(ctx, `SELECT event_id FROM webhook_cursor`).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		err = q.db.QueryRow(ctx, `INSERT INTO webhook_cursor (event_id) SELECT coalesce(max(id), 0) FROM events
			ON CONFLICT (one) DO UPDATE SET event_id = webhook_cursor.event_id RETURNING event_id`).Scan(&id)
	}
	if err != nil {
		return 0, fmt.Errorf("webhook cursor: %w", mapErr(err))
	}
	return id, nil
}

// AdvanceWebhookCursor moves the cursor to eventID (never back).
func (q *Queries) AdvanceWebhookCursor(ctx context.Context, eventID int64) error {
	_, err := q.db.Exec(ctx, `UPDATE webhook_cursor SET event_id = greatest(event_id, $1)`, eventID)
	if err != nil {
		return fmt.Errorf("advance webhook cursor: %w", mapErr(err))
	}
	return nil
}

// NewestEventID is the ID of the newest event; 0 when there is none.
func (q *Queries) NewestEventID(ctx context.Context) (int64, error) {
	var id int64
	if err := q.db.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM events`).Scan(&id); err != nil {
		return 0, fmt.Errorf("newest event: %w", mapErr(err))
	}
	return id, nil
}

// HookedEvents returns up to limit events after afterID and at most upTo, oldest first, of the
// boxes whose owner has a webhook, with that owner: the events a dispatcher may have to deliver.
func (q *Queries) HookedEvents(ctx context.Context, afterID, upTo int64, limit int) ([]Event, []string, error) {
	rows, err := q.db.Query(ctx, `SELECT e.id, e.actor, e.box_id, e.action, e.detail, e.at, b.owner_id
		FROM events e JOIN boxes b ON b.id = e.box_id
		WHERE e.id > $1 AND e.id <= $2 AND EXISTS (SELECT 1 FROM webhooks w WHERE w.user_id = b.owner_id)
		ORDER BY e.id LIMIT $3`, afterID, upTo, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("events after %d: %w", afterID, mapErr(err))
	}
	defer rows.Close()
	var events []Event
	var owners []string
	for rows.Next() {
		var e Event
		var owner string
		if err := rows.Scan(&e.ID, &e.Actor, &e.BoxID, &e.Action, &e.Detail, &e.At, &owner); err != nil {
			return nil, nil, fmt.Errorf("events after %d: %w", afterID, mapErr(err))
		}
		events, owners = append(events, e), append(owners, owner)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("events after %d: %w", afterID, mapErr(err))
	}
	return events, owners, nil
}

// EventByID returns one event.
func (q *Queries) EventByID(ctx context.Context, id int64) (Event, error) {
	var e Event
	err := q.db.QueryRow(ctx, `SELECT id, actor, coalesce(box_id, ''), action, detail, at FROM events WHERE id = $1`, id).
		Scan(&e.ID, &e.Actor, &e.BoxID, &e.Action, &e.Detail, &e.At)
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, fmt.Errorf("event %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Event{}, fmt.Errorf("event %d: %w", id, mapErr(err))
	}
	return e, nil
}
