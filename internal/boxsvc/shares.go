package boxsvc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
)

// Share gives user (a name or a usr_ ID) role on the box until expires (nil: until revoked),
// replacing any share they had (admin). So that Share is no way to learn which user names
// exist, an unknown user gets the same answer as a known one, and nothing is granted; either
// way the answer echoes the user as the caller named them (ListShares lists what was granted).
func (s *Service) Share(ctx context.Context, caller string, id cocoonbox.BoxID, user string, role cocoonbox.Role, expires *time.Time) (store.Share, error) {
	if err := role.Validate(); err != nil {
		return store.Share{}, err
	}
	if expires != nil && !expires.After(time.Now()) {
		return store.Share{}, cocoonbox.Invalid("expires_at", "must be in the future")
	}
	a, err := s.authorize(ctx, caller, id, cocoonbox.RoleAdmin)
	if err != nil {
		return store.Share{}, err
	}
	u, err := s.user(ctx, user)
	if cocoonbox.ErrorCode(err) == cocoonbox.ENotFound {
		s.audit(ctx, caller, id, "share", map[string]any{"user": strings.TrimSpace(user), "role": role, "expires_at": expires, "unknown_user": true})
		return shareAnswer(id, user, role, expires, time.Now()), nil
	}
	if err != nil {
		return store.Share{}, err
	}
	if u.ID == a.box.Owner {
		return store.Share{}, cocoonbox.Errorf(cocoonbox.EConflict, "user: %s owns box %s", u.Name, id)
	}
	sh, err := s.Store.PutShare(ctx, id, u.ID, role, expires)
	if err != nil {
		return store.Share{}, fmt.Errorf("share box %s: %w", id, err)
	}
	s.audit(ctx, caller, id, "share", map[string]any{"user": u.ID, "role": role, "expires_at": expires})
	return shareAnswer(id, user, sh.Role, sh.ExpiresAt, sh.CreatedAt), nil
}

// shareAnswer is what Share returns: the grant with the user as the caller named them (an ID or
// a name, never the other), the same for a user who exists and one who does not.
func shareAnswer(id cocoonbox.BoxID, user string, role cocoonbox.Role, expires *time.Time, at time.Time) store.Share {
	sh := store.Share{BoxID: id, Role: role, ExpiresAt: expires, CreatedAt: at}
	if user = strings.TrimSpace(user); strings.HasPrefix(user, "usr_") {
		sh.UserID = user
	} else {
		sh.UserName = user
	}
	return sh
}

// Unshare takes user's share of the box away (admin). An unknown user gets the same answer as
// a known one without a share, naming the user as the caller did.
func (s *Service) Unshare(ctx context.Context, caller string, id cocoonbox.BoxID, user string) error {
	if _, err := s.authorize(ctx, caller, id, cocoonbox.RoleAdmin); err != nil {
		return err
	}
	noShare := cocoonbox.Errorf(cocoonbox.ENotFound, "user: %s has no share of box %s", strings.TrimSpace(user), id)
	u, err := s.user(ctx, user)
	if cocoonbox.ErrorCode(err) == cocoonbox.ENotFound {
		return noShare
	}
	if err != nil {
		return err
	}
	err = s.Store.DeleteShare(ctx, id, u.ID)
	if errors.Is(err, store.ErrNotFound) {
		return noShare
	}
	if err != nil {
		return fmt.Errorf("unshare box %s: %w", id, err)
	}
	s.audit(ctx, caller, id, "unshare", map[string]any{"user": u.ID})
	return nil
}

// ListShares lists the box's active shares (admin).
func (s *Service) ListShares(ctx context.Context, caller string, id cocoonbox.BoxID) ([]store.Share, error) {
	if _, err := s.authorize(ctx, caller, id, cocoonbox.RoleAdmin); err != nil {
		return nil, err
	}
	return s.Store.ListShares(ctx, id)
}

// user finds a user by name or ID; an unknown one is not found, naming the field.
func (s *Service) user(ctx context.Context, ref string) (store.User, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return store.User{}, cocoonbox.Invalid("user", "is required: a user name or ID")
	}
	var u store.User
	var err error
	if strings.HasPrefix(ref, "usr_") {
		u, err = s.Store.UserByID(ctx, ref)
	} else {
		u, err = s.Store.UserByName(ctx, ref)
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.User{}, cocoonbox.Errorf(cocoonbox.ENotFound, "user: no user %q", ref)
	}
	return u, err
}
