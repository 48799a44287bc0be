package pgcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
)

// withAdmin runs fn on the cluster's admin connection to the postgres database, dialing it on
// first use and again after it breaks; the connection serves one caller at a time.
func (c *Cluster) withAdmin(ctx context.Context, fn func(*pgx.Conn) error) error {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	if c.admin == nil || c.admin.IsClosed() {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			return err
		}
		c.admin = conn
	}
	return fn(c.admin)
}

func (c *Cluster) exec(ctx context.Context, sql string, args ...any) error {
	return c.withAdmin(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, sql, args...)
		return err
	})
}

func (c *Cluster) closeAdmin() {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	if c.admin != nil {
		c.admin.Close(context.Background())
		c.admin = nil
	}
}

// CreateDatabase creates database name, as a copy of template when it is not empty. Copying a
// migrated template is how tests get a fresh schema in milliseconds; the template must have no
// open connections.
func (c *Cluster) CreateDatabase(ctx context.Context, name, template string) error {
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if err := c.exec(ctx, sql); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// DropDatabase drops database name if it exists, disconnecting its sessions first.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	if err := c.exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// ensureDatabase creates name unless it exists. A plain CREATE DATABASE with the error ignored
// would need this package to classify SQLSTATEs; asking first is as good for a single owner.
func (c *Cluster) ensureDatabase(ctx context.Context, name string) error {
	var exists bool
	err := c.withAdmin(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	})
	if err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	return c.CreateDatabase(ctx, name, "")
}

// ensurePassword returns the TCP password kept in the cluster directory, making one on first use.
// It is readable by the user that runs Start only, not by the server's account.
func (c *Cluster) ensurePassword() (string, error) {
	path := filepath.Join(c.dir, passwordName)
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read password: %w", err)
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("make password: %w", err)
	}
	pw := hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write password: %w", err)
	}
	return pw, nil
}
