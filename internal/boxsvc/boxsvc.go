// Package boxsvc is the one service layer over the box workflows that the gRPC API, MCP tools and
// the CLI share: it checks who may act on a box, then creates, wakes, hibernates, deletes and
// reads boxes only through their workflow (Update-with-Start, updates and the status query), so
// every state change is durable and visible in the Temporal UI.
package boxsvc

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// Service creates and drives boxes.
type Service struct {
	Temporal client.Client
	Store    *store.Store
	Policy   workflows.Policy // applied to new boxes
}

// CreateRequest describes a new box. ID may be set by the caller to make create idempotent: a
// second create with the same ID returns the same box.
type CreateRequest struct {
	ID   cocoonbox.BoxID
	Name string
	Size cocoonbox.Size
}

// Create starts the box's workflow (or finds it) and waits until the box runs.
func (s *Service) Create(ctx context.Context, owner string, req CreateRequest) (workflows.Status, error) {
	if req.ID == "" {
		req.ID = cocoonbox.NewBoxID()
	}
	if req.Size == "" {
		req.Size = cocoonbox.DefaultSize
	}
	b := cocoonbox.Box{ID: req.ID, Owner: owner, Name: req.Name, Size: req.Size}
	if err := b.Validate(); err != nil {
		return workflows.Status{}, err
	}
	if existing, err := s.Store.BoxByID(ctx, req.ID); err == nil && existing.Owner != owner {
		return workflows.Status{}, cocoonbox.Errorf(cocoonbox.EConflict, "box %s exists", req.ID)
	}
	start := s.Temporal.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       workflows.BoxWorkflowID(req.ID),
		TaskQueue:                workflows.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.SearchAttrOwner.ValueSet(owner),
			workflows.SearchAttrBoxName.ValueSet(req.Name),
			workflows.SearchAttrBoxState.ValueSet(string(cocoonbox.BoxStateCreating)),
		),
	}, workflows.BoxWorkflow, workflows.BoxWorkflowInput{
		BoxID: req.ID, Owner: owner, Name: req.Name, Size: req.Size, Policy: s.Policy,
	})
	h, err := s.Temporal.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName:   workflows.UpdateCreate,
			Args:         []any{workflows.CreateInput{}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return workflows.Status{}, translate(fmt.Errorf("create box %s: %w", req.ID, err))
	}
	var st workflows.Status
	if err := h.Get(ctx, &st); err != nil {
		return workflows.Status{}, translate(fmt.Errorf("create box %s: %w", req.ID, err))
	}
	return st, nil
}

// Wake brings the box back if it sleeps.
func (s *Service) Wake(ctx context.Context, owner string, id cocoonbox.BoxID) (workflows.Status, error) {
	return s.update(ctx, owner, id, workflows.UpdateWake, workflows.WakeInput{})
}

// Hibernate puts the box to sleep.
func (s *Service) Hibernate(ctx context.Context, owner string, id cocoonbox.BoxID) (workflows.Status, error) {
	return s.update(ctx, owner, id, workflows.UpdateHibernate, workflows.HibernateInput{})
}

// Delete releases the box's sandbox and ends its workflow, keeping its snapshots.
func (s *Service) Delete(ctx context.Context, owner string, id cocoonbox.BoxID) (workflows.Status, error) {
	return s.DeleteWith(ctx, owner, id, workflows.DeleteInput{})
}

// DeleteWith is Delete with options, such as purging the box's snapshots.
func (s *Service) DeleteWith(ctx context.Context, owner string, id cocoonbox.BoxID, in workflows.DeleteInput) (workflows.Status, error) {
	return s.update(ctx, owner, id, workflows.UpdateDelete, in)
}

// SetPolicy replaces the box's policy (idle hibernate, lease, durable hibernate, retention).
func (s *Service) SetPolicy(ctx context.Context, owner string, id cocoonbox.BoxID, p workflows.Policy) (workflows.Status, error) {
	return s.update(ctx, owner, id, workflows.UpdateSetPolicy, workflows.SetPolicyInput(p))
}

// Snapshot streams the box's disk to object storage and returns the verified snapshot.
func (s *Service) Snapshot(ctx context.Context, owner string, id cocoonbox.BoxID) (workflows.SnapshotResult, error) {
	return updateAs[workflows.SnapshotResult](ctx, s, owner, id, workflows.UpdateSnapshot, workflows.SnapshotInput{})
}

// Restore replaces the box's state with a snapshot ("" the newest); a failed restore leaves the
// box as it was.
func (s *Service) Restore(ctx context.Context, owner string, id cocoonbox.BoxID, snapshotID string) (workflows.Status, error) {
	if snapshotID != "" {
		if err := cocoonbox.ValidateSnapshotID("snapshot_id", snapshotID); err != nil {
			return workflows.Status{}, err
		}
	}
	return s.update(ctx, owner, id, workflows.UpdateRestore, workflows.RestoreInput{SnapshotID: snapshotID})
}

// ListSnapshots returns the box's snapshots, newest first.
func (s *Service) ListSnapshots(ctx context.Context, owner string, id cocoonbox.BoxID) ([]cocoonbox.Snapshot, error) {
	if err := s.authorize(ctx, owner, id); err != nil {
		return nil, err
	}
	return s.Store.ListSnapshots(ctx, id)
}

// PinSnapshot keeps a snapshot from retention (pinned) or gives it back (unpinned).
func (s *Service) PinSnapshot(ctx context.Context, owner string, id cocoonbox.BoxID, snapshotID string, pinned bool) error {
	if err := cocoonbox.ValidateSnapshotID("snapshot_id", snapshotID); err != nil {
		return err
	}
	if err := s.authorize(ctx, owner, id); err != nil {
		return err
	}
	snap, err := s.Store.SnapshotByID(ctx, snapshotID)
	if errors.Is(err, store.ErrNotFound) || err == nil && snap.BoxID != id {
		return cocoonbox.Errorf(cocoonbox.ENotFound, "snapshot %s not found", snapshotID)
	}
	if err != nil {
		return err
	}
	return s.Store.SetSnapshotPinned(ctx, snapshotID, pinned)
}

// Get returns the box's status from its workflow.
func (s *Service) Get(ctx context.Context, owner string, id cocoonbox.BoxID) (workflows.Status, error) {
	if err := s.authorize(ctx, owner, id); err != nil {
		return workflows.Status{}, err
	}
	v, err := s.Temporal.QueryWorkflow(ctx, workflows.BoxWorkflowID(id), "", workflows.QueryStatus)
	if err != nil {
		return workflows.Status{}, translate(fmt.Errorf("get box %s: %w", id, err))
	}
	var st workflows.Status
	if err := v.Get(&st); err != nil {
		return workflows.Status{}, fmt.Errorf("decode box %s status: %w", id, err)
	}
	return st, nil
}

func (s *Service) update(ctx context.Context, owner string, id cocoonbox.BoxID, name string, arg any) (workflows.Status, error) {
	return updateAs[workflows.Status](ctx, s, owner, id, name, arg)
}

// updateAs sends update name to the box's workflow after the ownership check and waits for its
// answer of type T.
func updateAs[T any](ctx context.Context, s *Service, owner string, id cocoonbox.BoxID, name string, arg any) (T, error) {
	var out T
	if err := s.authorize(ctx, owner, id); err != nil {
		return out, err
	}
	h, err := s.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflows.BoxWorkflowID(id),
		UpdateName:   name,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return out, translate(fmt.Errorf("%s box %s: %w", name, id, err))
	}
	if err := h.Get(ctx, &out); err != nil {
		return out, translate(fmt.Errorf("%s box %s: %w", name, id, err))
	}
	return out, nil
}

// authorize checks that owner owns the box; a box the caller may not see reads as not found.
// (Shares arrive with the API issue.)
func (s *Service) authorize(ctx context.Context, owner string, id cocoonbox.BoxID) error {
	if err := id.Validate(); err != nil {
		return err
	}
	b, err := s.Store.BoxByID(ctx, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && b.Owner != owner {
		return cocoonbox.Errorf(cocoonbox.ENotFound, "box %s not found", id)
	}
	return err
}
