// Package store keeps cocoonbox's durable records in PostgreSQL: users and their tokens, boxes,
// shares, snapshots, secrets, agent runs and the audit log. It owns the schema (embedded goose
// migrations, applied by Open) and every query, and it is the one place that knows pgx's errors:
// callers see ErrNotFound, ErrConflict and ErrInvalid.
package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is a connection pool with the queries on it. It is safe for concurrent use.
type Store struct {
	*Queries
	pool pool
}

// Queries are the queries, bound either to the pool or to one transaction (see InTx).
type Queries struct {
	db dbtx
}

// dbtx is what queries need, satisfied by both the pool and a transaction.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Open connects to the database at url (a postgres:// URL or key=value DSN) and brings its schema
// up to date. Several processes may open the same database at once: migrations are serialized
// with an advisory lock, and a database already up to date is left untouched.
func Open(ctx context.Context, url string) (*Store, error) {
	s, err := Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Connect returns a store for the database at url without reaching it: the pool connects on
// first use and again after the database comes back, so a role can start while PostgreSQL is
// down. Call Migrate before the first query.
func Connect(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	pgxPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	p := pool{Pool: pgxPool}
	return &Store{Queries: &Queries{db: p}, pool: p}, nil
}

// Migrate brings the schema up to date (see Open).
func (s *Store) Migrate(ctx context.Context) error {
	if err := migrate(ctx, s.pool.Pool); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	return nil
}

// Close waits for queries in flight and closes every connection.
func (s *Store) Close() {
	s.pool.Close()
}

// Ping checks that the database answers, for readiness probes.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping store: %w", mapErr(err))
	}
	return nil
}

// InTx runs fn in one transaction, committing if fn returns nil and rolling back otherwise, so a
// multi-statement change lands whole or not at all. fn must use only the Queries it is given.
func (s *Store) InTx(ctx context.Context, fn func(q *Queries) error) error {
	return s.pool.begin(ctx, func(tx pgx.Tx) error {
		return fn(&Queries{db: tx})
	})
}
