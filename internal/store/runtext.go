package store

import (
	"context"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// runTextChannel is the PostgreSQL notification channel of the model text agent runs stream: the
// worker that relays a step's model call publishes the text as the gateway sends it, and every
// API server listening hands it to the run's followers (WatchRun). Notifications are not stored:
// a follower who was not listening reads the step's recorded text instead.
const runTextChannel = "cocoonbox_run_text"

// maxRunTextPiece bounds the text of one notification, below PostgreSQL's 8000-byte payload
// limit with room for the JSON around it.
const maxRunTextPiece = 6000

// RunText is a piece of the model's text in a run's step, as it streamed from the gateway.
type RunText struct {
	Run  string `json:"run"`
	Step int    `json:"step"`
	Text string `json:"text"`
}

// NotifyRunText publishes t to the API servers listening, in pieces of at most maxRunTextPiece
// bytes cut at character boundaries.
func (q *Queries) NotifyRunText(ctx context.Context, t RunText) error {
	for text := t.Text; text != ""; {
		n := min(len(text), maxRunTextPiece)
		for n < len(text) && !utf8.RuneStart(text[n]) {
			n--
		}
		piece := t
		piece.Text, text = text[:n], text[n:]
		payload, err := json.Marshal(piece)
		if err != nil {
			return fmt.Errorf("notify run %s text: %w", t.Run, err)
		}
		if _, err := q.db.Exec(ctx, `SELECT pg_notify($1, $2)`, runTextChannel, string(payload)); err != nil {
			return fmt.Errorf("notify run %s text: %w", t.Run, mapErr(err))
		}
	}
	return nil
}

// ListenRunText calls fn with every piece of run text published, in order, until ctx ends or the
// connection fails (the error; the caller listens again). It holds one connection of the pool.
// ready, when not nil, is called once the listener is registered.
func (s *Store) ListenRunText(ctx context.Context, ready func(), fn func(RunText)) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("listen for run text: %w", mapErr(err))
	}
	// The connection carries a LISTEN: it goes back closed, never to another caller.
	defer func() {
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, `LISTEN `+runTextChannel); err != nil {
		return fmt.Errorf("listen for run text: %w", mapErr(err))
	}
	if ready != nil {
		ready()
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("listen for run text: %w", mapErr(err))
		}
		var t RunText
		if json.Unmarshal([]byte(n.Payload), &t) == nil && t.Run != "" {
			fn(t)
		}
	}
}
