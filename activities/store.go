package activities

import (
	"context"
	"fmt"

	"github.com/loomhand/cocoonbox"
)

// BoxStore is the part of the database the box workflow writes: the box row and its audit trail.
// The workflow is the source of truth; these rows are what the API lists without asking it.
type BoxStore interface {
	// CreateBox inserts the box row; a row with the same ID already there is success, so a
	// retried activity or a second create does not fail.
	CreateBox(ctx context.Context, b cocoonbox.Box) error
	// SetBoxState records the box's state, its current sandbox and, for failed, the reason.
	SetBoxState(ctx context.Context, boxID cocoonbox.BoxID, state cocoonbox.BoxState, sandboxID, reason string) error
	// AppendEvent adds a line to the box's audit trail.
	AppendEvent(ctx context.Context, boxID cocoonbox.BoxID, kind, detail string) error
	// SetBoxStateWithEvent is SetBoxState and AppendEvent in one transaction.
	SetBoxStateWithEvent(ctx context.Context, boxID cocoonbox.BoxID, state cocoonbox.BoxState, sandboxID, reason, kind, detail string) error
}

// Store holds the store activities of the box workflow.
type Store struct {
	Boxes BoxStore
}

// RecordBoxInput is the box row to create.
type RecordBoxInput struct {
	BoxID cocoonbox.BoxID
	Owner string
	Name  string
	Size  cocoonbox.Size
}

// SetStateInput is a state transition to record.
type SetStateInput struct {
	BoxID     cocoonbox.BoxID
	State     cocoonbox.BoxState
	SandboxID string
	Reason    string
	// Event, when set, is appended to the box's events in the same transaction: the state a
	// hibernate or a wake ends in and the line that says so land together.
	Event *EventInput `json:",omitempty"`
}

// EventInput is one audit event.
type EventInput struct {
	BoxID  cocoonbox.BoxID
	Kind   string // e.g. "created", "woke", "sandbox-replaced"
	Detail string
}

// RecordBox creates the box row, or finds it already there.
func (a *Store) RecordBox(ctx context.Context, in RecordBoxInput) error {
	b := cocoonbox.Box{ID: in.BoxID, Owner: in.Owner, Name: in.Name, Size: in.Size, State: cocoonbox.BoxStateCreating}
	if err := b.Validate(); err != nil {
		return classify(err)
	}
	if err := a.Boxes.CreateBox(ctx, b); err != nil {
		return classify(fmt.Errorf("create box %s: %w", in.BoxID, err))
	}
	return nil
}

// SetState records a state transition.
func (a *Store) SetState(ctx context.Context, in SetStateInput) error {
	return classify(a.setState(ctx, in))
}

// setState is SetState with its error not yet classified, for the activities that write a box
// row on the way to something else.
func (a *Store) setState(ctx context.Context, in SetStateInput) error {
	if err := in.State.Validate(); err != nil {
		return err
	}
	var err error
	if in.Event != nil {
		err = a.Boxes.SetBoxStateWithEvent(ctx, in.BoxID, in.State, in.SandboxID, in.Reason, in.Event.Kind, in.Event.Detail)
	} else {
		err = a.Boxes.SetBoxState(ctx, in.BoxID, in.State, in.SandboxID, in.Reason)
	}
	if err != nil {
		return fmt.Errorf("set box %s state: %w", in.BoxID, err)
	}
	return nil
}

// Event appends an audit event.
func (a *Store) Event(ctx context.Context, in EventInput) error {
	if err := a.Boxes.AppendEvent(ctx, in.BoxID, in.Kind, in.Detail); err != nil {
		return classify(fmt.Errorf("append box %s event: %w", in.BoxID, err))
	}
	return nil
}
