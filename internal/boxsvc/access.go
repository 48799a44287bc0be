package boxsvc

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
)

// Resolve turns what a caller typed into a box ID: an ID as it is, a name among the caller's own
// boxes (names are unique per owner; a shared box is named by its ID). An unknown name is not
// found.
func (s *Service) Resolve(ctx context.Context, caller, ref string) (cocoonbox.BoxID, error) {
	ref = strings.TrimSpace(ref)
	switch {
	case ref == "":
		return "", cocoonbox.Invalid("box", "is required: a box ID (bx_…) or the name of one of your boxes")
	case strings.HasPrefix(ref, "bx_"):
		id := cocoonbox.BoxID(ref)
		return id, id.Validate()
	}
	b, err := s.Store.BoxByOwnerName(ctx, caller, ref)
	if errors.Is(err, store.ErrNotFound) {
		return "", cocoonbox.Errorf(cocoonbox.ENotFound, "box %q not found", ref)
	}
	if err != nil {
		return "", fmt.Errorf("resolve box %q: %w", ref, err)
	}
	return b.ID, nil
}

// Authorize checks that caller holds need on the box and returns the caller's role, with the
// same answers as every other call: not found for a box the caller cannot see, forbidden naming
// the role for one the caller can see but not act on. For calls whose work lives elsewhere (the
// desktop edge, agent runs) but whose rules are the box's.
func (s *Service) Authorize(ctx context.Context, caller string, id cocoonbox.BoxID, need cocoonbox.Role) (cocoonbox.Role, error) {
	a, err := s.authorize(ctx, caller, id, need)
	return a.role, err
}

// access is a box as a caller may act on it.
type access struct {
	box  store.Box
	role cocoonbox.Role
}

// authorize loads the box and the caller's role on it and checks that the role allows need. A
// caller with no role at all, or a deleted box, reads as not found, so strangers cannot learn
// that a box exists; a caller who can see the box but lacks the role is told which role it needs.
func (s *Service) authorize(ctx context.Context, caller string, id cocoonbox.BoxID, need cocoonbox.Role) (access, error) {
	if err := id.Validate(); err != nil {
		return access{}, err
	}
	notFound := cocoonbox.Errorf(cocoonbox.ENotFound, "box %s not found", id)
	b, err := s.Store.BoxByID(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return access{}, notFound
	case err != nil:
		return access{}, fmt.Errorf("read box %s: %w", id, err)
	case b.DeletedAt != nil:
		return access{}, notFound
	}
	role := cocoonbox.RoleOwner
	if b.Owner != caller {
		role, err = s.Store.ShareRole(ctx, id, caller)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return access{}, notFound
		case err != nil:
			return access{}, fmt.Errorf("read share of box %s: %w", id, err)
		}
	}
	if !role.Allows(need) {
		return access{}, cocoonbox.Errorf(cocoonbox.EForbidden, "box %s: this needs the %s role; you have %s", id, need, role)
	}
	return access{box: b, role: role}, nil
}
