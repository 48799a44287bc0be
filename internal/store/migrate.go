package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrate applies pending migrations through goose's provider API, which, unlike goose's global
// functions, keeps no package state, so tests can migrate many databases in parallel.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	p, closeDB, err := newProvider(pool)
	if err != nil {
		return err
	}
	defer closeDB()
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// SchemaVersion returns the version of the newest migration applied to the database.
func (s *Store) SchemaVersion(ctx context.Context) (int64, error) {
	p, closeDB, err := newProvider(s.pool.Pool)
	if err != nil {
		return 0, err
	}
	defer closeDB()
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("schema version: %w", err)
	}
	return v, nil
}

func newProvider(pool *pgxpool.Pool) (*goose.Provider, func(), error) {
	files, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, nil, fmt.Errorf("migrations: %w", err)
	}
	// The lock makes API replicas that start together migrate one at a time; it is retried
	// every second for up to five minutes.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, nil, fmt.Errorf("migration lock: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	p, err := goose.NewProvider(goose.DialectPostgres, db, files,
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("migrations: %w", err)
	}
	return p, func() { db.Close() }, nil
}

// LatestSchema is the version of the newest migration this build holds: a database at a higher
// version was written by a newer build, which this one must not run against.
func LatestSchema() int64 {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		panic(err) // embedded at build time
	}
	var latest int64
	for _, e := range entries {
		num, _, _ := strings.Cut(e.Name(), "_")
		if v, err := strconv.ParseInt(num, 10, 64); err == nil && v > latest {
			latest = v
		}
	}
	return latest
}
