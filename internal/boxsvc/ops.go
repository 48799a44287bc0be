package boxsvc

import (
	"context"
	"errors"
	"fmt"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// Wake brings the box back if it sleeps (driver). A box whose row says it is up is not held to
// its owner's box-hours budget, as nothing is started for it.
func (s *Service) Wake(ctx context.Context, caller string, id cocoonbox.BoxID) (View, error) {
	a, err := s.authorize(ctx, caller, id, cocoonbox.RoleDriver)
	if err != nil {
		return View{}, err
	}
	switch a.box.State {
	case cocoonbox.BoxStateRunning, cocoonbox.BoxStateSnapshotting, cocoonbox.BoxStateWaking:
	default:
		if err := s.withinBoxHours(ctx, func(ctx context.Context) (store.BoxHours, error) { return s.Store.BoxHoursOfBox(ctx, id) }); err != nil {
			return View{}, err
		}
	}
	return s.send(ctx, a, caller, id, workflows.UpdateWake, workflows.WakeInput{Reason: "requested by " + s.who(ctx, caller)})
}

// Hibernate puts the box to sleep (driver).
func (s *Service) Hibernate(ctx context.Context, caller string, id cocoonbox.BoxID) (View, error) {
	return s.update(ctx, caller, id, cocoonbox.RoleDriver, workflows.UpdateHibernate, workflows.HibernateInput{By: s.who(ctx, caller)})
}

// who names a user in a box's events: their name, or their ID when it cannot be read. The
// front door has read the caller's row with their token already (WithCallerName).
func (s *Service) who(ctx context.Context, userID string) string {
	if c, ok := ctx.Value(callerNameKey{}).(callerName); ok && c.id == userID && c.name != "" {
		return c.name
	}
	if s.Store == nil {
		return userID
	}
	if u, err := s.Store.UserByID(ctx, userID); err == nil && u.Name != "" {
		return u.Name
	}
	return userID
}

// WithCallerName tells the box operations under ctx the name of user id, read by the front door
// with the token the request carried, so the box's events name the caller without reading
// their row a second time.
func WithCallerName(ctx context.Context, id, name string) context.Context {
	return context.WithValue(ctx, callerNameKey{}, callerName{id: id, name: name})
}

type callerNameKey struct{}

type callerName struct{ id, name string }

// Delete releases the box's sandbox and ends its workflow, keeping its snapshots (admin).
func (s *Service) Delete(ctx context.Context, caller string, id cocoonbox.BoxID) (View, error) {
	return s.DeleteWith(ctx, caller, id, workflows.DeleteInput{})
}

// DeleteWith is Delete with options, such as purging the box's snapshots.
func (s *Service) DeleteWith(ctx context.Context, caller string, id cocoonbox.BoxID, in workflows.DeleteInput) (View, error) {
	v, err := s.update(ctx, caller, id, cocoonbox.RoleAdmin, workflows.UpdateDelete, in)
	if cocoonbox.ErrorCode(err) == cocoonbox.ENotFound && ctx.Value(requestIDKey{}) != nil {
		// A delete sent again (the API restarted before it answered) may find its first send
		// done and the box gone: to the owner that is the delete's answer, not "not found".
		// Only a request with an ID is a resend; a plain second delete still learns the box is
		// gone.
		if b, berr := s.Store.BoxByID(ctx, id); berr == nil && b.DeletedAt != nil && b.Owner == caller {
			return view(access{box: b, role: cocoonbox.RoleOwner}, workflows.Status{BoxID: id, State: cocoonbox.BoxStateDeleted}), nil
		}
	}
	return v, err
}

// SetPolicy replaces the box's policy: idle hibernate, lease, durable hibernate, retention
// (admin). The network is not applied (SetNetwork changes it).
func (s *Service) SetPolicy(ctx context.Context, caller string, id cocoonbox.BoxID, p workflows.Policy) (View, error) {
	return s.update(ctx, caller, id, cocoonbox.RoleAdmin, workflows.UpdateSetPolicy, workflows.SetAll(p))
}

// SetNetwork replaces the box's egress policy (admin): an internet box can become an allow-list
// and back, at once on its sandbox; a box without a NIC keeps none.
func (s *Service) SetNetwork(ctx context.Context, caller string, id cocoonbox.BoxID, n cocoonbox.Network) (View, error) {
	if err := n.Validate(); err != nil {
		return View{}, err
	}
	return s.update(ctx, caller, id, cocoonbox.RoleAdmin, workflows.UpdateSetNetwork, workflows.SetNetworkInput{Network: n})
}

// Snapshot streams the box's disk to object storage and returns the verified snapshot (driver).
func (s *Service) Snapshot(ctx context.Context, caller string, id cocoonbox.BoxID) (workflows.SnapshotResult, error) {
	a, err := s.authorize(ctx, caller, id, cocoonbox.RoleDriver)
	if err != nil {
		return workflows.SnapshotResult{}, err
	}
	res, err := workflows.Update[workflows.SnapshotResult](once(ctx, caller, workflows.UpdateSnapshot), s.Temporal, id, workflows.UpdateSnapshot, workflows.SnapshotInput{})
	if err == nil {
		s.audit(ctx, caller, id, workflows.UpdateSnapshot, map[string]any{"snapshot": res.Snapshot.ID, "role": a.role})
	}
	return res, err
}

// Restore replaces the box's state with a snapshot ("" the newest); a failed restore leaves the
// box as it was (admin: it discards the box's current state).
func (s *Service) Restore(ctx context.Context, caller string, id cocoonbox.BoxID, snapshotID string) (View, error) {
	if snapshotID != "" {
		if err := cocoonbox.ValidateSnapshotID("snapshot_id", snapshotID); err != nil {
			return View{}, err
		}
	}
	return s.update(ctx, caller, id, cocoonbox.RoleAdmin, workflows.UpdateRestore, workflows.RestoreInput{SnapshotID: snapshotID})
}

// Recreate starts a lost box again from its template, empty (admin): the owner's choice for a
// box whose sandbox is gone with no snapshot, never made for them.
func (s *Service) Recreate(ctx context.Context, caller string, id cocoonbox.BoxID) (View, error) {
	return s.update(ctx, caller, id, cocoonbox.RoleAdmin, workflows.UpdateRecreate, workflows.RecreateInput{})
}

// ListSnapshots returns the box's snapshots, newest first (viewer).
func (s *Service) ListSnapshots(ctx context.Context, caller string, id cocoonbox.BoxID) ([]cocoonbox.Snapshot, error) {
	if _, err := s.authorize(ctx, caller, id, cocoonbox.RoleViewer); err != nil {
		return nil, err
	}
	return s.Store.ListSnapshots(ctx, id)
}

// PinSnapshot keeps a snapshot from retention (pinned) or gives it back (admin).
func (s *Service) PinSnapshot(ctx context.Context, caller string, id cocoonbox.BoxID, snapshotID string, pinned bool) error {
	if err := cocoonbox.ValidateSnapshotID("snapshot_id", snapshotID); err != nil {
		return err
	}
	if _, err := s.authorize(ctx, caller, id, cocoonbox.RoleAdmin); err != nil {
		return err
	}
	snap, err := s.Store.SnapshotByID(ctx, snapshotID)
	if errors.Is(err, store.ErrNotFound) || err == nil && snap.BoxID != id {
		return cocoonbox.Errorf(cocoonbox.ENotFound, "snapshot %s not found", snapshotID)
	}
	if err != nil {
		return err
	}
	if err := s.Store.SetSnapshotPinned(ctx, snapshotID, pinned); err != nil {
		return err
	}
	s.audit(ctx, caller, id, "pin_snapshot", map[string]any{"snapshot": snapshotID, "pinned": pinned})
	return nil
}

// update sends update name to the box's workflow after checking that the caller holds need, and
// records the change in the audit trail.
func (s *Service) update(ctx context.Context, caller string, id cocoonbox.BoxID, need cocoonbox.Role, name string, arg any) (View, error) {
	a, err := s.authorize(ctx, caller, id, need)
	if err != nil {
		return View{}, err
	}
	return s.send(ctx, a, caller, id, name, arg)
}

// send is update once the caller's access a is known.
func (s *Service) send(ctx context.Context, a access, caller string, id cocoonbox.BoxID, name string, arg any) (View, error) {
	var st workflows.Status
	err := s.revived(ctx, id, func() (err error) {
		st, err = workflows.Update[workflows.Status](once(ctx, caller, name), s.Temporal, id, name, arg)
		return err
	})
	if err != nil {
		return View{}, err
	}
	// Written beside the answer: the row is best effort either way, and its write was up to
	// two milliseconds of every hibernate and wake.
	later(ctx, func(ctx context.Context) { s.audit(ctx, caller, id, name, map[string]any{"role": a.role}) })
	return view(a, st), nil
}

// MaxEvents bounds one ListEvents; DefaultEvents is what a request without a limit gets.
const (
	MaxEvents     = 1000
	DefaultEvents = 100
)

// ListEvents returns what happened to the box, oldest first: the events after afterID, or the
// newest with afterID 0 (driver: the events name the commands, paths and users of the box).
func (s *Service) ListEvents(ctx context.Context, caller string, id cocoonbox.BoxID, afterID int64, limit int) ([]store.Event, error) {
	switch {
	case afterID < 0:
		return nil, cocoonbox.Invalid("after_id", fmt.Sprintf("must be 0 or an event ID, got %d", afterID))
	case limit < 0 || limit > MaxEvents:
		return nil, cocoonbox.Invalid("limit", fmt.Sprintf("must be from 1 to %d (0: %d), got %d", MaxEvents, DefaultEvents, limit))
	case limit == 0:
		limit = DefaultEvents
	}
	if _, err := s.authorize(ctx, caller, id, cocoonbox.RoleDriver); err != nil {
		return nil, err
	}
	return s.Store.BoxEvents(ctx, string(id), afterID, limit)
}

// MaxRequestID bounds a request ID (WithRequestID).
const MaxRequestID = 64

// ValidateRequestID checks a client's request ID, named field: up to MaxRequestID letters,
// digits, '-', '_' or '.'.
func ValidateRequestID(field, id string) error {
	if len(id) > MaxRequestID {
		return cocoonbox.Invalid(field, fmt.Sprintf("must be at most %d characters, got %d", MaxRequestID, len(id)))
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return cocoonbox.Invalid(field, fmt.Sprintf("may hold only letters, digits, '-', '_' and '.', got %q", r))
		}
	}
	return nil
}

// WithRequestID marks the box operations under ctx as the client's request id (checked with
// ValidateRequestID): the same caller sending the same operation with the same id again, say
// after the API it asked restarted, gets the first one's result instead of a second operation.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

type requestIDKey struct{}

// once is ctx with the box workflow update ID of the caller's operation name for ctx's request
// ID, if it has one. The caller is part of it: another user's request with the same ID is an
// operation of its own.
func once(ctx context.Context, caller, name string) context.Context {
	id, _ := ctx.Value(requestIDKey{}).(string)
	if id == "" {
		return ctx
	}
	return workflows.WithUpdateID(ctx, name+"/"+caller+"/"+id)
}
