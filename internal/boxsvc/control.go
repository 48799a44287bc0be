package boxsvc

import (
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
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
	st, err := send[workflows.Status](ctx, s, id, workflows.UpdateTakeOver, in)
	if err != nil {
		return View{}, err
	}
	s.audit(ctx, caller, id, "takeover", map[string]any{"role": a.role, "forced": in.Force})
	s.tellAgent(ctx, id, st, true)
	return view(a, st), nil
}

// HandBack ends the caller's control lease (driver); the owner or an admin may end anyone's.
func (s *Service) HandBack(ctx context.Context, caller string, id cocoonbox.BoxID) (View, error) {
	a, err := s.authorize(ctx, caller, id, cocoonbox.RoleDriver)
	if err != nil {
		return View{}, err
	}
	in := workflows.HandBackInput{User: caller, Force: a.role.Allows(cocoonbox.RoleAdmin)}
	st, err := send[workflows.Status](ctx, s, id, workflows.UpdateHandBack, in)
	if err != nil {
		return View{}, err
	}
	s.audit(ctx, caller, id, "handback", map[string]any{"role": a.role})
	s.tellAgent(ctx, id, st, st.Controller != "")
	return view(a, st), nil
}

// leaseCallTimeout bounds telling a box's agent of a lease change.
const leaseCallTimeout = 3 * time.Second

// tellAgent tells the box's agent, when agent runs pin the box, that the lease changed hands, so
// the desktop actions of a step running now stop (or may go on) at once rather than from the
// next step. It is best effort: each step's request carries the lease as it was when the step
// started, and a box that sleeps runs no step and is not woken for this.
func (s *Service) tellAgent(ctx context.Context, id cocoonbox.BoxID, st workflows.Status, held bool) {
	runs := slices.ContainsFunc(st.Pins, func(p string) bool { return strings.HasPrefix(p, workflows.RunIDPrefix) })
	if !runs || st.State != cocoonbox.BoxStateRunning || s.Sandbox == nil || s.Credentials == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseCallTimeout)
	defer cancel()
	err := func() error {
		sid, token, err := s.Tokens.SandboxToken(ctx, string(id))
		if err != nil {
			return err
		}
		cred, err := s.Credentials(id)
		if err != nil {
			return err
		}
		_, err = activities.CallAgent(ctx, s.Sandbox, sandbox.SandboxRef{ID: sid, Token: token}, cred,
			func(ctx context.Context, conn *grpc.ClientConn) (*agentvmv1.SetDesktopLeaseResponse, error) {
				return agentvmv1.NewAgentsClient(conn).SetDesktopLease(ctx, &agentvmv1.SetDesktopLeaseRequest{Held: held})
			})
		return err
	}()
	if err != nil && s.Logger != nil {
		s.Logger.Warn("tell the box's agent of the lease", "box", id, "held", held, "err", err)
	}
}
