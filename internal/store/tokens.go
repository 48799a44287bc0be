package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"time"
)

// TokenPrefix starts every API token, so a token is recognizable in a config file or a leak
// report and never mistaken for another service's secret.
const TokenPrefix = "cbx_"

// NewToken returns a new API token: TokenPrefix and 32 random bytes in lowercase base32. Only its
// HashToken is stored; the token itself is shown to the user once.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("new token: %w", err)
	}
	return TokenPrefix + lowerBase32.EncodeToString(b), nil
}

// HashToken returns the SHA-256 of token, the form tokens are stored and looked up in. A plain,
// unsalted hash is enough: tokens carry 256 random bits, so there is nothing to brute-force.
func HashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// Token is a stored API token, without the secret.
type Token struct {
	ID         string
	UserID     string
	Name       string
	CreatedAt  time.Time
	LastUsedAt *time.Time // nil until first use; updated at most once a minute
	RevokedAt  *time.Time
	ExpiresAt  *time.Time // nil: never expires
	Scope      string     // ScopeFull, ScopeRead or ScopeMCP
}

// Token scopes: what a token may do, enforced by the API.
const (
	ScopeFull = "full" // everything its user may do
	ScopeRead = "read" // only calls that change nothing
	ScopeMCP  = "mcp"  // only the /mcp endpoint
)

const tokenColumns = `id, user_id, name, created_at, last_used_at, revoked_at, expires_at, scope`

func (t *Token) fields() []any {
	return []any{&t.ID, &t.UserID, &t.Name, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt, &t.ExpiresAt, &t.Scope}
}

// CreateToken stores a token for userID under hash (see HashToken). It does not expire unless
// SetTokenExpiry says so, and has ScopeFull unless SetTokenScope says otherwise. An unknown user
// is ErrNotFound.
func (q *Queries) CreateToken(ctx context.Context, userID, name string, hash []byte) (Token, error) {
	var t Token
	err := q.db.QueryRow(ctx,
		`INSERT INTO tokens (id, user_id, name, hash) VALUES ($1, $2, $3, $4) RETURNING `+tokenColumns,
		newID("tok"), userID, name, hash,
	).Scan(t.fields()...)
	if err != nil {
		return Token{}, fmt.Errorf("create token for %s: %w", userID, mapErr(err))
	}
	return t, nil
}

// SetTokenExpiry makes token id stop working at the given time; run it with CreateToken in InTx
// to create an expiring token.
func (q *Queries) SetTokenExpiry(ctx context.Context, id string, at time.Time) error {
	tag, err := q.db.Exec(ctx, `UPDATE tokens SET expires_at = $2 WHERE id = $1`, id, at)
	if err != nil {
		return fmt.Errorf("set token expiry %s: %w", id, mapErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set token expiry %s: %w", id, ErrNotFound)
	}
	return nil
}

// SetTokenScope limits token id to scope; run it with CreateToken in InTx, so the token never
// exists with a wider scope. A scope the table does not know is ErrInvalid.
func (q *Queries) SetTokenScope(ctx context.Context, id, scope string) error {
	tag, err := q.db.Exec(ctx, `UPDATE tokens SET scope = $2 WHERE id = $1`, id, scope)
	if err != nil {
		return fmt.Errorf("set token scope %s: %w", id, mapErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set token scope %s: %w", id, ErrNotFound)
	}
	return nil
}

// TokenUsable reports whether token id still authenticates: not revoked, not expired. Open
// streams and desktop connections ask it again while they last, so a revoked token ends them.
func (q *Queries) TokenUsable(ctx context.Context, id string) (bool, error) {
	var ok bool
	err := q.db.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM tokens WHERE id = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()))`,
		id).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check token %s: %w", id, mapErr(err))
	}
	return ok, nil
}

// userByTokenHash finds a usable token and its user in one round trip. It records the use, but
// at most once a minute per token: authentication runs on every API call, and rewriting the row
// each time would turn every read into a write. The returned Token shows the previous last use.
const userByTokenHash = `
WITH t AS (
    SELECT ` + tokenColumns + ` FROM tokens
    WHERE hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
), touched AS (
    UPDATE tokens SET last_used_at = now()
    WHERE id = (SELECT id FROM t) AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
)
SELECT u.id, u.name, u.admin, u.created_at, t.id, t.user_id, t.name, t.created_at, t.last_used_at, t.revoked_at, t.expires_at, t.scope
FROM t JOIN users u ON u.id = t.user_id AND u.disabled_at IS NULL`

// UserByTokenHash authenticates: it returns the user a token belongs to and the token. An
// unknown, revoked or expired token, or one of a disabled user, is ErrNotFound, deliberately
// indistinguishable to callers.
func (q *Queries) UserByTokenHash(ctx context.Context, hash []byte) (User, Token, error) {
	var u User
	var t Token
	err := q.db.QueryRow(ctx, userByTokenHash, hash).
		Scan(append([]any{&u.ID, &u.Name, &u.Admin, &u.CreatedAt}, t.fields()...)...)
	if err != nil {
		return User{}, Token{}, fmt.Errorf("user by token: %w", mapErr(err))
	}
	return u, t, nil
}

// RevokeToken revokes token id of userID. Revoking twice is fine (the first time is kept); a
// token that does not exist or belongs to someone else is ErrNotFound, so a user can neither
// revoke nor probe for other users' tokens.
func (q *Queries) RevokeToken(ctx context.Context, userID, id string) error {
	tag, err := q.db.Exec(ctx,
		`UPDATE tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 AND user_id = $2`,
		id, userID)
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", id, mapErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("revoke token %s: %w", id, ErrNotFound)
	}
	return nil
}
