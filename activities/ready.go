package activities

import (
	"context"

	"go.temporal.io/sdk/activity"
)

// ReadyRecordedInput waits for the box's sandbox to answer, then writes the box's row.
type ReadyRecordedInput struct {
	SandboxInput
	// Then is the box row (with its event, when set) written once the sandbox answers.
	Then SetStateInput
}

// ReadyRecordedResult says whether the row of ReadyRecordedInput.Then was written. When it was
// not, the workflow writes it itself, with its retries.
type ReadyRecordedResult struct {
	Settled bool
}

// ReadyRecorded is WaitReady and then the row the box enters once its sandbox answers, in one
// local activity where a create took two: a hop through the worker fewer.
func (a *Sandbox) ReadyRecorded(ctx context.Context, in ReadyRecordedInput) (ReadyRecordedResult, error) {
	if err := a.WaitReady(ctx, in.SandboxInput); err != nil {
		return ReadyRecordedResult{}, err
	}
	if a.Rows == nil {
		return ReadyRecordedResult{}, nil
	}
	if err := a.Rows.setState(ctx, in.Then); err != nil {
		// The sandbox answers; the workflow writes the row again with its own retries.
		activity.GetLogger(ctx).Warn("record the box ready", "box", in.BoxID, "error", err)
		return ReadyRecordedResult{}, nil
	}
	return ReadyRecordedResult{Settled: true}, nil
}

// record creates the box row (RecordBox) through Rows.
func (a *Sandbox) record(ctx context.Context, in RecordBoxInput) error {
	if a.Rows == nil {
		return classify(errNoRows)
	}
	return a.Rows.RecordBox(ctx, in)
}
