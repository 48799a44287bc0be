package store

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pool is the pgx pool with one thing added: a statement whose connection turns out dead before
// the statement reached the server runs once more on a fresh connection. When PostgreSQL
// restarts, every idle connection in the pool is dead, and pgxpool only pings one that has been
// idle for over a second, so without this each recently used connection failed one request
// ("write failed: broken pipe") after the server was back. The first such failure empties the
// pool, since the others went with the same server. Only errors pgconn vouches were raised before
// any byte was sent are retried, so no statement ever runs twice.
type pool struct {
	*pgxpool.Pool
}

// lost reports whether err means the statement never reached the server over a dead connection,
// and drops every pooled connection when err says the server ended the connection, so the retry
// (or the next caller) dials afresh.
func (p pool) lost(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || !serverGone(err) {
		return false
	}
	p.Reset()
	return pgconn.SafeToRetry(err)
}

// serverGone reports an error that means the connection to the server is gone or cannot be made:
// the server ended it (SQLSTATE class 57P, as on a shutdown or crash), a send failed, or no
// connection could be dialed. Errors of a cancelled or expired context are not among them.
func serverGone(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return strings.HasPrefix(pgErr.Code, "57P")
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return true
	}
	return pgconn.SafeToRetry(err)
}

func (p pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := p.Pool.Exec(ctx, sql, args...)
	if p.lost(ctx, err) {
		tag, err = p.Pool.Exec(ctx, sql, args...)
	}
	return tag, err
}

func (p pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := p.first(ctx, sql, args)
	if p.lost(ctx, err) {
		rows, err = p.first(ctx, sql, args)
	}
	return rows, err
}

// first runs a query and reads its first row. A statement the connection has prepared before is
// sent without waiting for an answer, so a dead connection shows only when the first row is read:
// reading it here lets Query retry that too. A query error therefore comes from Query (as it does
// for a statement not prepared yet) rather than from the rows.
func (p pool) first(ctx context.Context, sql string, args []any) (pgx.Rows, error) {
	rows, err := p.Pool.Query(ctx, sql, args...)
	if err != nil {
		return rows, err
	}
	next := rows.Next()
	if !next {
		if err := rows.Err(); err != nil {
			return rows, err
		}
	}
	return &peeked{Rows: rows, next: next}, nil
}

// peeked is rows whose first Next has been called already, by first.
type peeked struct {
	pgx.Rows
	next, given bool
}

func (r *peeked) Next() bool {
	if !r.given {
		r.given = true
		return r.next
	}
	return r.Rows.Next()
}

// QueryRow goes through Query, where a dead connection shows before any row is read, and reads
// the one row as pgx's own QueryRow does.
func (p pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := p.Query(ctx, sql, args...)
	return row{rows: rows, err: err}
}

// row is the first row of rows, or err.
type row struct {
	rows pgx.Rows
	err  error
}

func (r row) Scan(dest ...any) error {
	if r.err != nil {
		if r.rows != nil {
			r.rows.Close()
		}
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// begin runs fn in a transaction (pgx.BeginFunc), beginning it once more if the first BEGIN met a
// dead connection: fn has not run then, so nothing is done twice.
func (p pool) begin(ctx context.Context, fn func(pgx.Tx) error) error {
	ran := false
	run := func(tx pgx.Tx) error {
		ran = true
		return fn(tx)
	}
	err := pgx.BeginFunc(ctx, p.Pool, run)
	if !ran && p.lost(ctx, err) {
		err = pgx.BeginFunc(ctx, p.Pool, run)
	}
	return err
}

func (p pool) Ping(ctx context.Context) error {
	err := p.Pool.Ping(ctx)
	if p.lost(ctx, err) {
		err = p.Pool.Ping(ctx)
	}
	return err
}
