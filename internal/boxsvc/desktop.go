package boxsvc

import (
	"context"
	"slices"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// DesktopPort is where the box's desktop (Xvnc, RFB) listens on the box's loopback.
const DesktopPort = 5900

// CheckDesktop says whether caller may open the box's desktop now: watching needs viewer;
// controlling needs driver and the control lease (TakeOver) in the caller's name, because only
// the lease holder may send input. It is checked when a ticket is issued, when the edge
// connects, and again while a connection lasts, so a revoked share or a lease taken over ends it.
func (s *Service) CheckDesktop(ctx context.Context, caller string, id cocoonbox.BoxID, control bool) error {
	need, check := desktopRule(caller, id, control)
	if check == nil {
		// Watching needs the role alone, so the box's workflow is not asked (a query waits for
		// any workflow task under way); the edge reads its state when it connects.
		_, err := s.authorize(ctx, caller, id, need)
		return err
	}
	_, _, err := s.checked(ctx, caller, id, need, check)
	return err
}

// DialDesktop opens a byte pipe to the box's desktop for caller, after the checks of
// CheckDesktop, waking the box through its workflow when it sleeps and caller is a driver (a
// viewer is refused a sleeping box, which stays asleep). The caller owns the
// connection; while it is open the edge reports it through SetViewers, which keeps the box awake.
func (s *Service) DialDesktop(ctx context.Context, caller string, id cocoonbox.BoxID, control bool) (Conn, error) {
	need, check := desktopRule(caller, id, control)
	ref, err := s.reach(ctx, caller, id, need, check)
	if err != nil {
		return nil, err
	}
	conn, err := s.Link.Sandbox.DialPort(ctx, ref, DesktopPort)
	if err != nil {
		return nil, boxlink.DialError(err, "desktop")
	}
	mode := "view"
	if control {
		mode = "control"
	}
	// Recorded beside the connection's start rather than before it: the row is best effort
	// either way (audit), and its write was a millisecond or two of every desktop's first frame.
	later(ctx, func(ctx context.Context) { s.audit(ctx, caller, id, "desktop", map[string]any{"mode": mode}) })
	time.AfterFunc(DesktopSettle, func() { s.touch(context.WithoutCancel(ctx), id) })
	return conn, nil
}

// DesktopSettle is how long a new desktop connection's bookkeeping waits: the touch and the viewer
// report are each a workflow task of the box, and sent at once they took CPU from the first
// frame (10 ms of its 90 on two cores). A box's idle period is minutes, so neither comes late.
const DesktopSettle = 300 * time.Millisecond

// ClaimControl takes the box's one control connection slot for connection conn, served by API
// process source, once DialDesktop's checks passed: the slot is the box workflow's, so a second
// control connection is refused (a conflict) whichever API replica it reaches.
func (s *Service) ClaimControl(ctx context.Context, id cocoonbox.BoxID, source, conn string) error {
	return workflows.ClaimControl(ctx, s.Temporal, id, source, conn)
}

// ReleaseControl gives the slot back as connection conn closes (best effort, logged, and sent
// after ctx's cancellation too: an API process that dies lets go when its viewer reports
// expire).
func (s *Service) ReleaseControl(ctx context.Context, id cocoonbox.BoxID, conn string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := workflows.ControlClosed(ctx, s.Temporal, id, conn); err != nil && s.Logger != nil {
		s.Logger.Warn("release the desktop's control slot", "box", id, "err", err)
	}
}

// SetViewers tells the box's workflow how many desktop connections are open through the API
// process source, and how many of them in control mode (best effort, logged): a box with viewers
// is not idle-hibernated, and a control lease whose holder has no control connection is released
// after the box's lease idle. The workflow
// adds up the sources' counts and forgets one that has not reported for
// workflows.ViewersReportTTL, so a source repeats its count every workflows.ViewersReportEvery
// while it has viewers. It outlives ctx's cancellation, because the last report is sent as a
// connection closes.
func (s *Service) SetViewers(ctx context.Context, id cocoonbox.BoxID, source string, n, control int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := workflows.ReportViewers(ctx, s.Temporal, id, source, n, control); err != nil && s.Logger != nil {
		s.Logger.Warn("report desktop viewers", "box", id, "viewers", n, "control", control, "err", err)
	}
}

// desktopRule is what CheckDesktop checks: the role, and for control the lease in caller's name.
func desktopRule(caller string, id cocoonbox.BoxID, control bool) (cocoonbox.Role, func(workflows.Status) error) {
	if !control {
		return cocoonbox.RoleViewer, nil
	}
	return cocoonbox.RoleDriver, func(st workflows.Status) error {
		switch st.Controller {
		case caller:
			return nil
		case "":
			return cocoonbox.Errorf(cocoonbox.EConflict, "box %s: take over first: control mode needs the desktop's control lease", id)
		}
		return cocoonbox.Errorf(cocoonbox.EConflict, "box %s: take over first: another user holds the desktop's control lease", id)
	}
}

// wakeable are the states a driver's call wakes a box from.
var wakeable = []cocoonbox.BoxState{cocoonbox.BoxStateHibernated, cocoonbox.BoxStateHibernating, cocoonbox.BoxStateWaking, cocoonbox.BoxStateFailed}

// awake returns a ref to the box's sandbox given its status, waking the box through its workflow
// when it sleeps, so the workflow never believes asleep a box the engine woke behind it. Only a
// role that may wake the box (driver, as Wake) wakes it: a viewer's look at a sleeping box is
// refused and leaves it asleep, since a wake costs the owner a sandbox. The caller has checked
// the role (reach).
func (s *Service) awake(ctx context.Context, caller string, id cocoonbox.BoxID, st workflows.Status, role cocoonbox.Role) (sandbox.SandboxRef, error) {
	var err error
	switch {
	case workflows.Up(st.State):
	case slices.Contains(wakeable, st.State):
		if !role.Allows(cocoonbox.RoleDriver) {
			return sandbox.SandboxRef{}, cocoonbox.Errorf(cocoonbox.EConflict, "box %s is %s; a driver can wake it", id, st.State)
		}
		if err := s.withinBoxHours(ctx, func(ctx context.Context) (store.BoxHours, error) { return s.Store.BoxHoursOfBox(ctx, id) }); err != nil {
			return sandbox.SandboxRef{}, err
		}
		if st, err = workflows.Wake(ctx, s.Temporal, id, "used by "+s.who(ctx, caller)); err != nil {
			return sandbox.SandboxRef{}, err
		}
	default:
		return sandbox.SandboxRef{}, cocoonbox.Errorf(cocoonbox.EConflict, "box %s is %s", id, st.State)
	}
	ref, err := s.Link.Tokens.SandboxToken(ctx, string(id))
	if err != nil || ref.ID != st.SandboxID {
		return sandbox.SandboxRef{}, cocoonbox.Errorf(cocoonbox.EUnavailable, "box %s is changing sandboxes; try again", id)
	}
	return ref, nil
}
