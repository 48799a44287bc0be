package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/activity"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// HibernateRecordedInput is a hibernate that first records the box's leaving running.
type HibernateRecordedInput struct {
	SandboxInput
	// Record is the box row written before the engine is called (state hibernating).
	Record SetStateInput
	// Then, when set, is the box row (with its event) written once the engine has hibernated
	// the sandbox: the hibernate's last row in the same local activity, a hop through the
	// worker fewer again.
	Then *SetStateInput
}

// HibernateRecordedResult says whether the row of in.Then was written. When it was not (or
// was not asked for), the workflow writes it itself, with its retries.
type HibernateRecordedResult struct {
	Settled bool
}

// errNoRows is HibernateRecorded's answer when the worker gave it no store to write the row to.
var errNoRows = errors.New("this worker records no box rows")

// HibernateRecorded writes in.Record, then hibernates the sandbox: one local activity where a
// hibernate took two, one hop through the worker fewer. The engine is not called when the row
// cannot be written: the API reaches the sandbox of a box whose row says it runs without asking
// its workflow, and an engine call on a sleeping sandbox would wake it behind the workflow. The
// sandbox's token is read while the row is written.
func (a *Sandbox) HibernateRecorded(ctx context.Context, in HibernateRecordedInput) (HibernateRecordedResult, error) {
	if a.Rows == nil {
		return HibernateRecordedResult{}, classify(errNoRows)
	}
	type refOrErr struct {
		ref sandbox.SandboxRef
		err error
	}
	read := make(chan refOrErr, 1)
	go func() {
		ref, err := a.ref(ctx, in.BoxID, in.SandboxID)
		read <- refOrErr{ref, err}
	}()
	werr := a.Rows.setState(ctx, in.Record)
	r := <-read
	switch {
	case werr != nil:
		return HibernateRecordedResult{}, classify(fmt.Errorf("hibernate: record the box's state: %w", werr))
	case r.err != nil:
		return HibernateRecordedResult{}, r.err
	}
	if err := a.call(ctx, r.ref, "hibernate", a.Client.Hibernate); err != nil {
		return HibernateRecordedResult{}, err
	}
	if in.Then == nil {
		return HibernateRecordedResult{}, nil
	}
	if err := a.Rows.setState(ctx, *in.Then); err != nil {
		// The sandbox sleeps; the workflow writes the row again with its own retries.
		activity.GetLogger(ctx).Warn("record the hibernated box", "box", in.BoxID, "error", err)
		return HibernateRecordedResult{}, nil
	}
	return HibernateRecordedResult{Settled: true}, nil
}
