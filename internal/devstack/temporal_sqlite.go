package devstack

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/headers"
	"go.temporal.io/server/common/persistence/sql/sqlplugin"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite" // registers the plugin and the "sqlite" database/sql driver
	sqliteschema "go.temporal.io/server/schema/sqlite"
)

// sqliteBusyTimeout is how long a connection waits for another's write lock. Temporal holds
// a single connection, so this matters only when something else (a sqlite3 shell, a backup)
// has the file open.
const sqliteBusyTimeout = "5000"

// sqliteConfig is the persistence config the server uses for both execution and visibility
// data: one file, so that one copy of the data dir carries everything.
func sqliteConfig(path string) *config.SQL {
	return &config.SQL{
		PluginName:   sqliteplugin.PluginName,
		DatabaseName: path,
		// Validated as non-empty by the server, unused by the sqlite plugin.
		ConnectAddr:     "localhost",
		ConnectProtocol: "tcp",
		ConnectAttributes: map[string]string{
			// WAL lets readers run beside the writer and, with synchronous=normal, commits
			// skip the fsync; without both, bursts of workflow starts time out.
			"journal_mode": "wal",
			"synchronous":  "normal",
			"busy_timeout": sqliteBusyTimeout,
		},
		// One connection: SQLite has one writer, and Temporal's transactions read before
		// they write, which with several connections fails with SQLITE_BUSY instead of
		// waiting. The plugin shares this connection between all services.
		MaxConns:     1,
		MaxIdleConns: 1,
	}
}

// prepareSQLite creates the schema in a new database file and refuses a file written by a
// different server version. The whole setup runs in one transaction, so a start killed half
// way leaves either no schema or a complete one, and the next start knows which.
//
// The server version is kept in PRAGMA user_version: Temporal does not migrate SQLite files
// between versions, and a clear refusal beats obscure failures later.
func prepareSQLite(ctx context.Context, path string) (retErr error) {
	want, err := versionStamp(headers.ServerVersion)
	if err != nil {
		return err
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout="+sqliteBusyTimeout)
	q.Add("_pragma", "journal_mode=wal")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return fmt.Errorf("open temporal database: %w", err)
	}
	defer func() { retErr = errors.Join(retErr, db.Close()) }()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("open temporal database %s: %w", path, err)
	}
	defer func() { _ = tx.Rollback() }()

	var have int64
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&have); err != nil {
		return fmt.Errorf("read temporal database version: %w", err)
	}
	if have != 0 && have != want {
		return fmt.Errorf("check temporal database: %s was written by server %s, this build runs %s; "+
			"SQLite files are not migrated between versions (move the file away to start afresh)",
			path, stampString(have), headers.ServerVersion)
	}
	var tables int
	err = tx.QueryRowContext(ctx,
		"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('namespaces', 'executions_visibility')").Scan(&tables)
	if err != nil {
		return fmt.Errorf("inspect temporal database: %w", err)
	}
	switch tables {
	case 0:
		if err := sqliteschema.SetupSchemaOnDB(schemaTx{ctx: ctx, tx: tx}); err != nil {
			return fmt.Errorf("create temporal schema: %w", err)
		}
	case 2:
	default:
		return fmt.Errorf("check temporal database: %s has a partial schema (move the file away to start afresh)", path)
	}
	if have != want {
		// PRAGMA takes no bind parameters; want is an integer we computed.
		if _, err := tx.ExecContext(ctx, "PRAGMA user_version = "+strconv.FormatInt(want, 10)); err != nil {
			return fmt.Errorf("stamp temporal database version: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit temporal schema: %w", err)
	}
	return nil
}

// schemaTx lets Temporal's own schema loader run inside our transaction. SetupSchemaOnDB
// only calls Exec; the embedded interface is nil so any other call fails loudly.
type schemaTx struct {
	sqlplugin.AdminDB
	ctx context.Context
	tx  *sql.Tx
}

func (s schemaTx) Exec(stmt string, args ...any) error {
	_, err := s.tx.ExecContext(s.ctx, stmt, args...)
	return err
}

// versionStamp packs "major.minor.patch" into one integer for PRAGMA user_version.
func versionStamp(v string) (int64, error) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) != 3 {
		return 0, fmt.Errorf("parse temporal server version %q: want major.minor.patch", v)
	}
	var n int64
	for _, p := range parts {
		// Drop pre-release suffixes such as "1-rc1"; they share the release's schema.
		p, _, _ = strings.Cut(p, "-")
		x, err := strconv.ParseInt(p, 10, 64)
		if err != nil || x < 0 || x > 999 {
			return 0, fmt.Errorf("parse temporal server version %q: bad component %q", v, p)
		}
		n = n*1000 + x
	}
	return n, nil
}

func stampString(n int64) string {
	return fmt.Sprintf("%d.%d.%d", n/1_000_000, n/1000%1000, n%1000)
}
