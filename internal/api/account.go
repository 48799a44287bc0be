package api

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

type accountService struct {
	cbv1.UnimplementedAccountServiceServer
	s *Server
}

// Token and user limits.
const (
	maxTokenName = 100
	// maxTokenTTL keeps an expiry representable everywhere it is stored and shown.
	maxTokenTTL = 100 * 365 * 24 * time.Hour
	// firstTokenName names the token CreateUser mints for a new user.
	firstTokenName = "first"
)

// userNamePattern is what the users table accepts as a name.
var userNamePattern = regexp.MustCompile(`^[a-z][a-z0-9._-]{0,62}$`)

// WhoAmI returns the caller.
func (a *accountService) WhoAmI(ctx context.Context, _ *cbv1.WhoAmIRequest) (*cbv1.WhoAmIResponse, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	return &cbv1.WhoAmIResponse{User: userProto(p.User), TokenName: p.Token.Name}, nil
}

// CreateToken mints a token for the caller. Only its hash is stored; the secret is in this
// answer and nowhere else. A token is created and given its expiry and scope in one
// transaction, so it never exists without them. Only a full token reaches this call (see
// readRoutes), so no token mints one of a wider scope; nor one that outlives it.
func (a *accountService) CreateToken(ctx context.Context, req *cbv1.CreateTokenRequest) (*cbv1.CreateTokenResponse, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	name := req.GetName()
	if n := utf8.RuneCountInString(name); n < 1 || n > maxTokenName {
		return nil, cocoonbox.Invalid("name", fmt.Sprintf("must be 1 to %d characters, got %d", maxTokenName, n))
	}
	ttl := req.GetTtlSeconds()
	if ttl < 0 || ttl > int64(maxTokenTTL/time.Second) {
		return nil, cocoonbox.Invalid("ttl_seconds", fmt.Sprintf("must be 0 (no expiry) to %d, got %d", int64(maxTokenTTL/time.Second), ttl))
	}
	scope, err := validScope(req.GetScope())
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var expires *time.Time
	if ttl > 0 {
		at := now.Add(time.Duration(ttl) * time.Second)
		expires = &at
	}
	if err := notOutliving(p.Token, expires, now); err != nil {
		return nil, err
	}
	secret, err := store.NewToken()
	if err != nil {
		return nil, err
	}
	var tok store.Token
	err = a.s.store.InTx(ctx, func(q *store.Queries) error {
		var err error
		if tok, err = q.CreateToken(ctx, p.User.ID, name, store.HashToken(secret)); err != nil {
			return err
		}
		if expires != nil {
			if err := q.SetTokenExpiry(ctx, tok.ID, *expires); err != nil {
				return err
			}
			tok.ExpiresAt = expires
		}
		if scope != store.ScopeFull {
			if err := q.SetTokenScope(ctx, tok.ID, scope); err != nil {
				return err
			}
			tok.Scope = scope
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("create token: %w", err)
	}
	a.s.audit(ctx, p.User.ID, "token.create", map[string]any{"token": tok.ID, "name": name, "expires_at": tok.ExpiresAt, "scope": tok.Scope, "by": p.Token.ID})
	return &cbv1.CreateTokenResponse{Token: tokenProto(tok), Secret: secret}, nil
}

// notOutliving refuses a token that would outlive the one minting it (minter): a leaked
// short-lived token must not turn into a lasting one. Refused rather than clamped, so the caller
// never holds a token that dies sooner than it asked for without being told.
func notOutliving(minter store.Token, expires *time.Time, now time.Time) error {
	if minter.ExpiresAt == nil {
		return nil
	}
	max := int64(minter.ExpiresAt.Sub(now) / time.Second)
	if expires == nil {
		return cocoonbox.Invalid("ttl_seconds", fmt.Sprintf(
			"must be 1 to %d: the token making this call expires at %s, and a token cannot mint one that outlives it",
			max, minter.ExpiresAt.UTC().Format(time.RFC3339)))
	}
	if expires.After(*minter.ExpiresAt) {
		return cocoonbox.Invalid("ttl_seconds", fmt.Sprintf(
			"must be at most %d: the token making this call expires at %s, and a token cannot mint one that outlives it",
			max, minter.ExpiresAt.UTC().Format(time.RFC3339)))
	}
	return nil
}

// ListTokens lists the caller's tokens, revoked and expired ones included.
func (a *accountService) ListTokens(ctx context.Context, _ *cbv1.ListTokensRequest) (*cbv1.ListTokensResponse, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	toks, err := a.s.store.ListTokens(ctx, p.User.ID)
	if err != nil {
		return nil, err
	}
	return &cbv1.ListTokensResponse{Tokens: protoList(toks, tokenProto)}, nil
}

// RevokeToken revokes one of the caller's tokens; another user's reads as not found.
func (a *accountService) RevokeToken(ctx context.Context, req *cbv1.RevokeTokenRequest) (*cbv1.RevokeTokenResponse, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetId() == "" {
		return nil, cocoonbox.Invalid("id", "is required: a token ID (tok_…) from ListTokens")
	}
	err = a.s.store.RevokeToken(ctx, p.User.ID, req.GetId())
	if errors.Is(err, store.ErrNotFound) {
		return nil, cocoonbox.Errorf(cocoonbox.ENotFound, "id: you have no token %q", req.GetId())
	}
	if err != nil {
		return nil, err
	}
	a.s.audit(ctx, p.User.ID, "token.revoke", map[string]any{"token": req.GetId()})
	return &cbv1.RevokeTokenResponse{}, nil
}

// CreateUser adds a user with a first token (admin only); user and token land together.
func (a *accountService) CreateUser(ctx context.Context, req *cbv1.CreateUserRequest) (*cbv1.CreateUserResponse, error) {
	p, err := mustAdmin(ctx, "creating users needs an admin account")
	if err != nil {
		return nil, err
	}
	name := req.GetName()
	if !userNamePattern.MatchString(name) {
		return nil, cocoonbox.Invalid("name", fmt.Sprintf(
			"must be a lowercase letter, then up to 62 lowercase letters, digits, dots, underscores or hyphens, got %q", name))
	}
	secret, err := store.NewToken()
	if err != nil {
		return nil, err
	}
	var u store.User
	err = a.s.store.InTx(ctx, func(q *store.Queries) error {
		var err error
		if u, err = q.CreateUser(ctx, store.NewUser{Name: name, Admin: req.GetAdmin()}); err != nil {
			return err
		}
		_, err = q.CreateToken(ctx, u.ID, firstTokenName, store.HashToken(secret))
		return err
	})
	if errors.Is(err, store.ErrConflict) {
		return nil, cocoonbox.Errorf(cocoonbox.EConflict, "name: a user called %q exists", name)
	}
	if err != nil {
		return nil, fmt.Errorf("create user: %w", err)
	}
	a.s.audit(ctx, p.User.ID, "user.create", map[string]any{"user": u.ID, "name": u.Name, "admin": u.Admin})
	return &cbv1.CreateUserResponse{User: userProto(u), Secret: secret}, nil
}

// ListUsers lists every user by name (admin only).
func (a *accountService) ListUsers(ctx context.Context, _ *cbv1.ListUsersRequest) (*cbv1.ListUsersResponse, error) {
	if _, err := mustAdmin(ctx, "listing users needs an admin account"); err != nil {
		return nil, err
	}
	users, err := a.s.store.ListUsers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return &cbv1.ListUsersResponse{Users: protoList(users, userProto)}, nil
}

// DisableUser disables a user (admin only): their tokens are revoked in the same transaction,
// then their open runs are told to stop. An admin cannot disable themselves, so a deployment
// always keeps the admin who acts.
func (a *accountService) DisableUser(ctx context.Context, req *cbv1.DisableUserRequest) (*cbv1.DisableUserResponse, error) {
	p, err := mustAdmin(ctx, "disabling users needs an admin account")
	if err != nil {
		return nil, err
	}
	u, err := a.userByRef(ctx, req.GetUser())
	if err != nil {
		return nil, err
	}
	if u.ID == p.User.ID {
		return nil, cocoonbox.Invalid("user", "is you: another admin must disable your account")
	}
	u, revoked, err := a.s.store.DisableUser(ctx, u.ID)
	if err != nil {
		return nil, fmt.Errorf("disable user: %w", err)
	}
	a.s.audit(ctx, p.User.ID, "user.disable", map[string]any{"user": u.ID, "name": u.Name, "tokens_revoked": revoked})
	resp := &cbv1.DisableUserResponse{User: userProto(u), TokensRevoked: int32(revoked)}
	if a.s.boxes != nil {
		// After the tokens are revoked: a run of theirs can start now only from a request that
		// passed its token check before, which the next disable cancels.
		n, err := a.s.boxes.CancelRunsOf(ctx, u.ID, p.User.ID)
		resp.RunsCancelled = int32(n)
		if err != nil {
			return nil, fmt.Errorf("the user is disabled; cancelling their runs failed (run it again): %w", err)
		}
	}
	return resp, nil
}

// userByRef finds a user by name or ID; neither is ENotFound naming the field.
func (a *accountService) userByRef(ctx context.Context, ref string) (store.User, error) {
	if ref == "" {
		return store.User{}, cocoonbox.Invalid("user", "is required: a user's name or ID")
	}
	u, err := a.s.store.UserByName(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		u, err = a.s.store.UserByID(ctx, ref)
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.User{}, cocoonbox.Errorf(cocoonbox.ENotFound, "user: no user is called or has the ID %q", ref)
	}
	return u, err
}

// mustAdmin is the caller when they are an admin, else a forbidden error with refusal as its
// message.
func mustAdmin(ctx context.Context, refusal string) (Principal, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return Principal{}, err
	}
	if !p.User.Admin {
		return Principal{}, cocoonbox.Errorf(cocoonbox.EForbidden, "%s", refusal)
	}
	return p, nil
}

// GetUsage sums the model calls of agent runs and the boxes' running hours and snapshot bytes:
// the caller's own, or everyone's for an admin who asks for all_users.
func (a *accountService) GetUsage(ctx context.Context, req *cbv1.GetUsageRequest) (*cbv1.GetUsageResponse, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	var since time.Time
	if req.GetSince() != nil {
		since = req.GetSince().AsTime()
	}
	u, err := a.s.boxes.Usage(ctx, p.User, req.GetBy(), since, req.GetAllUsers())
	if err != nil {
		return nil, err
	}
	resp := &cbv1.GetUsageResponse{Since: timestamppb.New(u.Since)}
	for _, r := range u.Rows {
		resp.Rows = append(resp.Rows, &cbv1.UsageRow{
			Key: r.Key, Name: r.UserName, Model: r.Model, Calls: r.Calls,
			InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, CachedTokens: r.CachedTokens, CostUsd: r.CostUSD,
		})
	}
	for _, b := range u.Boxes {
		resp.Boxes = append(resp.Boxes, &cbv1.BoxUsage{
			Box: b.Box, Name: b.Name, Owner: b.Owner, OwnerName: b.OwnerName,
			Hours: b.Hours, Snapshots: b.Snapshots, SnapshotBytes: b.SnapshotBytes,
		})
	}
	return resp, nil
}

// SetBudget sets or reads a user's monthly token budget (admin only).
func (a *accountService) SetBudget(ctx context.Context, req *cbv1.SetBudgetRequest) (*cbv1.Budget, error) {
	if _, err := mustAdmin(ctx, "budgets are set by an admin"); err != nil {
		return nil, err
	}
	u, err := a.userByRef(ctx, req.GetUser())
	if err != nil {
		return nil, err
	}
	if req.TokensPerMonth != nil || req.BoxHoursPerMonth != nil {
		if err := a.s.store.SetUserBudget(ctx, u.ID, store.BudgetChange{TokensPerMonth: req.TokensPerMonth, BoxHoursPerMonth: req.BoxHoursPerMonth}); err != nil {
			return nil, err
		}
	}
	b, err := a.s.store.UserBudget(ctx, u.ID)
	if err != nil {
		return nil, err
	}
	return &cbv1.Budget{User: u.Name, TokensPerMonth: b.TokensPerMonth, TokensUsed: b.TokensUsed,
		BoxHoursPerMonth: b.BoxHoursPerMonth, BoxHoursUsed: b.BoxHoursUsed}, nil
}
