package boxsvc

import (
	"context"
	"errors"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// Wake brings the box back if it sleeps (driver).
func (s *Service) Wake(ctx context.Context, caller string, id cocoonbox.BoxID) (View, error) {
	return s.update(ctx, caller, id, cocoonbox.RoleDriver, workflows.UpdateWake, workflows.WakeInput{})
}

// Hibernate puts the box to sleep (driver).
func (s *Service) Hibernate(ctx context.Context, caller string, id cocoonbox.BoxID) (View, error) {
	return s.update(ctx, caller, id, cocoonbox.RoleDriver, workflows.UpdateHibernate, workflows.HibernateInput{})
}

// Delete releases the box's sandbox and ends its workflow, keeping its snapshots (admin).
func (s *Service) Delete(ctx context.Context, caller string, id cocoonbox.BoxID) (View, error) {
	return s.DeleteWith(ctx, caller, id, workflows.DeleteInput{})
}

// DeleteWith is Delete with options, such as purging the box's snapshots.
func (s *Service) DeleteWith(ctx context.Context, caller string, id cocoonbox.BoxID, in workflows.DeleteInput) (View, error) {
	return s.update(ctx, caller, id, cocoonbox.RoleAdmin, workflows.UpdateDelete, in)
}

// SetPolicy replaces the box's policy: idle hibernate, lease, durable hibernate, retention
// (admin). The network is the box's for life: p.Network is not applied.
func (s *Service) SetPolicy(ctx context.Context, caller string, id cocoonbox.BoxID, p workflows.Policy) (View, error) {
	return s.update(ctx, caller, id, cocoonbox.RoleAdmin, workflows.UpdateSetPolicy, workflows.SetPolicyInput{
		IdleAfter: p.IdleAfter, LeaseTTL: p.LeaseTTL, DurableHibernate: p.DurableHibernate, KeepSnapshots: p.KeepSnapshots,
	})
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
	res, err := workflows.Update[workflows.SnapshotResult](ctx, s.Temporal, id, workflows.UpdateSnapshot, workflows.SnapshotInput{})
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
	s.audit(ctx, caller, id, "pin-snapshot", map[string]any{"snapshot": snapshotID, "pinned": pinned})
	return nil
}

// update sends update name to the box's workflow after checking that the caller holds need, and
// records the change in the audit trail.
func (s *Service) update(ctx context.Context, caller string, id cocoonbox.BoxID, need cocoonbox.Role, name string, arg any) (View, error) {
	a, err := s.authorize(ctx, caller, id, need)
	if err != nil {
		return View{}, err
	}
	st, err := workflows.Update[workflows.Status](ctx, s.Temporal, id, name, arg)
	if err != nil {
		return View{}, err
	}
	s.audit(ctx, caller, id, name, map[string]any{"role": a.role})
	return view(a, st), nil
}
