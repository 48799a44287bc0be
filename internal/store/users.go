package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// User is an account: a box owner, a share recipient, or an operator.
type User struct {
	ID        string
	Name      string
	Admin     bool // may create users and see every box
	CreatedAt time.Time
	// DisabledAt is when an admin disabled the user (DisableUser); nil while enabled.
	DisabledAt *time.Time
}

// NewUser is what CreateUser needs.
type NewUser struct {
	Name  string
	Admin bool
}

const userColumns = `id, name, admin, created_at, disabled_at`

func scanUser(row interface{ Scan(...any) error }, u *User) error {
	return row.Scan(&u.ID, &u.Name, &u.Admin, &u.CreatedAt, &u.DisabledAt)
}

// CreateUser adds a user. Names are lowercase ([a-z][a-z0-9._-]*, up to 63 characters) and
// unique: a taken name is ErrConflict, a malformed one ErrInvalid.
func (q *Queries) CreateUser(ctx context.Context, nu NewUser) (User, error) {
	var u User
	err := scanUser(q.db.QueryRow(ctx,
		`INSERT INTO users (id, name, admin) VALUES ($1, $2, $3) RETURNING `+userColumns,
		newID("usr"), nu.Name, nu.Admin,
	), &u)
	if err != nil {
		return User{}, fmt.Errorf("create user %q: %w", nu.Name, mapErr(err))
	}
	return u, nil
}

// UserByName returns the user called name, or ErrNotFound.
func (q *Queries) UserByName(ctx context.Context, name string) (User, error) {
	var u User
	err := scanUser(q.db.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE name = $1`, name), &u)
	if err != nil {
		return User{}, fmt.Errorf("user %q: %w", name, mapErr(err))
	}
	return u, nil
}

// UserByID returns the user with id, or ErrNotFound.
func (q *Queries) UserByID(ctx context.Context, id string) (User, error) {
	var u User
	err := scanUser(q.db.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE id = $1`, id), &u)
	if err != nil {
		return User{}, fmt.Errorf("user %s: %w", id, mapErr(err))
	}
	return u, nil
}

// CountUsers returns how many users exist; `cocoonbox dev` bootstraps the first one when it is 0.
func (q *Queries) CountUsers(ctx context.Context) (int, error) {
	var n int
	if err := q.db.QueryRow(ctx, `SELECT count(*) FROM users`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count users: %w", mapErr(err))
	}
	return n, nil
}

// ListUsers returns every user, by name.
func (q *Queries) ListUsers(ctx context.Context) ([]User, error) {
	rows, err := q.db.Query(ctx, `SELECT `+userColumns+` FROM users ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", mapErr(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (User, error) {
		var u User
		return u, scanUser(r, &u)
	})
	if err != nil {
		return nil, fmt.Errorf("list users: %w", mapErr(err))
	}
	return out, nil
}

// DisableUser disables user id and revokes every token of theirs in one transaction, returning
// the user and how many tokens it revoked. Disabling a disabled user changes nothing (its first
// time is kept); an unknown user is ErrNotFound.
func (s *Store) DisableUser(ctx context.Context, id string) (User, int, error) {
	var u User
	var revoked int64
	err := s.InTx(ctx, func(q *Queries) error {
		err := scanUser(q.db.QueryRow(ctx,
			`UPDATE users SET disabled_at = coalesce(disabled_at, now()) WHERE id = $1 RETURNING `+userColumns, id), &u)
		if err != nil {
			return fmt.Errorf("disable user %s: %w", id, mapErr(err))
		}
		tag, err := q.db.Exec(ctx, `UPDATE tokens SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL`, id)
		if err != nil {
			return fmt.Errorf("disable user %s: revoke tokens: %w", id, mapErr(err))
		}
		revoked = tag.RowsAffected()
		return nil
	})
	return u, int(revoked), err
}
