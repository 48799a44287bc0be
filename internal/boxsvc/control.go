package boxsvc

import (
	"context"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/workflows"
)

// TakeOver gives the caller the desktop's control lease (driver). While someone else holds it,
// only the owner or an admin may take it from them.
func (s *Service) TakeOver(ctx context.Context, caller string, id cocoonbox.BoxID) (View, error) {
	a, err := s.authorize(ctx, caller, id, cocoonbox.RoleDriver)
	if err != nil {
		return View{}, err
	}
	in := workflows.TakeOverInput{User: caller, Force: a.role.Allows(cocoonbox.RoleAdmin)}
	st, err := workflows.Update[workflows.Status](ctx, s.Temporal, id, workflows.UpdateTakeOver, in)
	if err != nil {
		return View{}, err
	}
	s.audit(ctx, caller, id, "takeover", map[string]any{"role": a.role, "forced": in.Force})
	return view(a, st), nil
}

// HandBack ends the caller's control lease (driver); the owner or an admin may end anyone's.
func (s *Service) HandBack(ctx context.Context, caller string, id cocoonbox.BoxID) (View, error) {
	a, err := s.authorize(ctx, caller, id, cocoonbox.RoleDriver)
	if err != nil {
		return View{}, err
	}
	in := workflows.HandBackInput{User: caller, Force: a.role.Allows(cocoonbox.RoleAdmin)}
	st, err := workflows.Update[workflows.Status](ctx, s.Temporal, id, workflows.UpdateHandBack, in)
	if err != nil {
		return View{}, err
	}
	s.audit(ctx, caller, id, "handback", map[string]any{"role": a.role})
	return view(a, st), nil
}
