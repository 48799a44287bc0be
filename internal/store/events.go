package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Event is one audit log entry: who did what to which box, and when.
type Event struct {
	ID     int64
	Actor  string // a user ID, or the name of a system component such as "worker"
	BoxID  string // empty when the action concerns no box
	Action string // dotted lowercase, such as "box.create" or "token.revoke"
	Detail json.RawMessage
	At     time.Time
}

// AppendEvent records e. ID and At are assigned by the database and ignored here; a nil Detail
// is stored as {}.
func (q *Queries) AppendEvent(ctx context.Context, e Event) error {
	detail := e.Detail
	if len(detail) == 0 {
		detail = json.RawMessage(`{}`)
	}
	_, err := q.db.Exec(ctx,
		`INSERT INTO events (actor, box_id, action, detail) VALUES ($1, NULLIF($2, ''), $3, $4)`,
		e.Actor, e.BoxID, e.Action, detail)
	if err != nil {
		return fmt.Errorf("append event %s: %w", e.Action, mapErr(err))
	}
	return nil
}

// EventsForBox returns up to limit of the newest events about boxID, newest first.
func (q *Queries) EventsForBox(ctx context.Context, boxID string, limit int) ([]Event, error) {
	return q.events(ctx, "events for box "+boxID, `box_id = $1`, boxID, limit)
}

// EventsByActor returns up to limit of the newest events actor caused, newest first.
func (q *Queries) EventsByActor(ctx context.Context, actor string, limit int) ([]Event, error) {
	return q.events(ctx, "events by "+actor, `actor = $1`, actor, limit)
}

func (q *Queries) events(ctx context.Context, op, where, arg string, limit int) ([]Event, error) {
	rows, err := q.db.Query(ctx,
		`SELECT id, actor, coalesce(box_id, ''), action, detail, at FROM events
		 WHERE `+where+` ORDER BY at DESC, id DESC LIMIT $2`, arg, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, mapErr(err))
	}
	return scanEvents(op, rows)
}

func scanEvents(op string, rows pgx.Rows) ([]Event, error) {
	defer rows.Close()
	var events []Event
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.ID, &e.Actor, &e.BoxID, &e.Action, &e.Detail, &e.At); err != nil {
			return nil, fmt.Errorf("%s: %w", op, mapErr(err))
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, mapErr(err))
	}
	return events, nil
}

// BoxEvents returns up to limit events about boxID, oldest first: those after afterID, or the
// newest when afterID is 0. Events are ordered by ID.
func (q *Queries) BoxEvents(ctx context.Context, boxID string, afterID int64, limit int) ([]Event, error) {
	op := "events for box " + boxID
	var (
		rows pgx.Rows
		err  error
	)
	const cols = `SELECT id, actor, coalesce(box_id, ''), action, detail, at FROM events`
	if afterID > 0 {
		rows, err = q.db.Query(ctx, cols+` WHERE box_id = $1 AND id > $2 ORDER BY id LIMIT $3`, boxID, afterID, limit)
	} else {
		rows, err = q.db.Query(ctx, `SELECT * FROM (`+cols+` WHERE box_id = $1 ORDER BY id DESC LIMIT $2) AS newest ORDER BY id`, boxID, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, mapErr(err))
	}
	return scanEvents(op, rows)
}
