package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// HibernateRecordedInput is a hibernate that first records the box's leaving running.
type HibernateRecordedInput struct {
	SandboxInput
	// Record is the box row written before the engine is called (state hibernating).
	Record SetStateInput
}

// errNoRows is HibernateRecorded's answer when the worker gave it no store to write the row to.
var errNoRows = errors.New("this worker records no box rows")

// HibernateRecorded writes in.Record, then hibernates the sandbox: one local activity where a
// hibernate took two, one hop through the worker fewer. The engine is not called when the row
// cannot be written: the API reaches the sandbox of a box whose row says it runs without asking
// its workflow, and an engine call on a sleeping sandbox would wake it behind the workflow. The
// sandbox's token is read while the row is written.
func (a *Sandbox) HibernateRecorded(ctx context.Context, in HibernateRecordedInput) error {
	if a.Rows == nil {
		return classify(errNoRows)
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
		return classify(fmt.Errorf("hibernate: record the box's state: %w", werr))
	case r.err != nil:
		return r.err
	}
	return a.call(ctx, r.ref, "hibernate", a.Client.Hibernate)
}
