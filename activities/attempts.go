package activities

import (
	"context"
	"fmt"

	"github.com/loomhand/cocoonbox"
)

// Attempts holds the activities of a best-of-N run that act on boxes. Boxes change only through
// their workflows, which activities do not import: the worker gives these the functions that
// send the updates.
type Attempts struct {
	Store AttemptsStore
	// Adopt makes box take the state of box from, through both boxes' workflows (a checkpoint
	// with memory of from, and box's adopt update); key names what it sends, so a retry finds
	// what an earlier try did.
	Adopt func(ctx context.Context, box, from cocoonbox.BoxID, key string) error
	// DeleteBox deletes a box and its snapshots through its workflow; a box already gone is done.
	DeleteBox func(ctx context.Context, box cocoonbox.BoxID) error
}

// AttemptsStateInput moves best-of-N run ID to State, with the attempt Chosen and the error of
// a failed run.
type AttemptsStateInput struct {
	ID     string
	State  string
	Chosen int
	Error  string `json:",omitempty"`
}

// SetAttemptsState records where a best-of-N run is.
func (a *Attempts) SetAttemptsState(ctx context.Context, in AttemptsStateInput) error {
	if err := a.Store.SetAttemptsState(ctx, in.ID, in.State, in.Chosen, in.Error); err != nil {
		return classify(err)
	}
	return nil
}

// AdoptAttemptInput accepts attempt Choice (1-based) of best-of-N run ID.
type AdoptAttemptInput struct {
	ID     string
	Choice int
	// Try counts the accepts of the run whose adopt failed before this one. The updates an
	// accept sends are keyed by it: a box workflow answers an update sent again with the same
	// ID with its first outcome, and a later accept must be sent anew.
	Try int `json:",omitempty"`
}

// AdoptAttempt gives the run's box the state of the chosen attempt's fork, as the run's row
// names them.
func (a *Attempts) AdoptAttempt(ctx context.Context, in AdoptAttemptInput) error {
	att, err := a.Store.AttemptsByID(ctx, in.ID)
	if err != nil {
		return classify(err)
	}
	if in.Choice < 1 || in.Choice > len(att.Forks) {
		return classify(cocoonbox.Invalid("choice", fmt.Sprintf("must be an attempt from 1 to %d, got %d", len(att.Forks), in.Choice)))
	}
	_, err = whileHeartbeating(ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, a.Adopt(ctx, att.BoxID, att.Forks[in.Choice-1], adoptKey(att.ID, in.Try))
	})
	if err != nil {
		return classify(fmt.Errorf("adopt attempt %d: %w", in.Choice, err))
	}
	return nil
}

// adoptKey keys the updates of accept try of run id (the first keeps the key it always had).
func adoptKey(id string, try int) string {
	if try == 0 {
		return "adopt-" + id
	}
	return fmt.Sprintf("adopt-%s/%d", id, try)
}

// DropForksInput names the best-of-N run whose forks go.
type DropForksInput struct {
	ID string
}

// DropForks deletes every fork of the run, as its row names them.
func (a *Attempts) DropForks(ctx context.Context, in DropForksInput) error {
	att, err := a.Store.AttemptsByID(ctx, in.ID)
	if err != nil {
		return classify(err)
	}
	for _, f := range att.Forks {
		if _, err := whileHeartbeating(ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, a.DeleteBox(ctx, f) }); err != nil {
			return classify(fmt.Errorf("delete fork %s: %w", f, err))
		}
	}
	return nil
}
