package workflows

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"

	"github.com/loomhand/cocoonbox"
)

// The typed client of the box workflow: what the API's service and the worker's activities use
// to reach a box's workflow, so none of them spells an update or a query by hand. Every error is
// a domain error (DomainError).

// Update sends the update name with arg to the box's workflow, waits for it to complete and
// returns its result.
func Update[T any](ctx context.Context, c client.Client, id cocoonbox.BoxID, name string, arg any) (T, error) {
	var out T
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   BoxWorkflowID(id),
		UpdateName:   name,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return out, DomainError(fmt.Errorf("%s box %s: %w", name, id, err))
	}
	if err := h.Get(ctx, &out); err != nil {
		return out, DomainError(fmt.Errorf("%s box %s: %w", name, id, err))
	}
	return out, nil
}

// GetStatus returns the box's status from its workflow's query, which writes no history.
func GetStatus(ctx context.Context, c client.Client, id cocoonbox.BoxID) (Status, error) {
	v, err := c.QueryWorkflow(ctx, BoxWorkflowID(id), "", QueryStatus)
	if err != nil {
		return Status{}, DomainError(fmt.Errorf("get box %s: %w", id, err))
	}
	var st Status
	if err := v.Get(&st); err != nil {
		return Status{}, fmt.Errorf("decode box %s status: %w", id, err)
	}
	return st, nil
}

// Wake wakes the box through its workflow's wake update (a no-op for a running box) and returns
// its status after.
func Wake(ctx context.Context, c client.Client, id cocoonbox.BoxID) (Status, error) {
	return Update[Status](ctx, c, id, UpdateWake, WakeInput{})
}

// Awake returns the status of a box that is up, waking it first when it is not. It asks the
// query first, since the box is usually up already and a query writes no history.
func Awake(ctx context.Context, c client.Client, id cocoonbox.BoxID) (Status, error) {
	if st, err := GetStatus(ctx, c, id); err == nil && Up(st.State) {
		return st, nil
	}
	return Wake(ctx, c, id)
}

// Up reports whether a box in state s has a sandbox to use: running, or snapshotting (which a
// box stays usable through).
func Up(s cocoonbox.BoxState) bool {
	return s == cocoonbox.BoxStateRunning || s == cocoonbox.BoxStateSnapshotting
}
