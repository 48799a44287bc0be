package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// Dispatcher starts the delivery of every new box event to the webhooks of the box's owner that
// ask for it. It follows a cursor over the events table; an event is dispatched by starting its
// delivery workflow (WebhookWorkflowID), which Temporal refuses to start twice, so a dispatcher
// killed between a start and the cursor's advance delivers nothing twice.
type Dispatcher struct {
	Temporal client.Client
	Store    *store.Store
	// Every is how often it looks for new events; 0 is a second.
	Every time.Duration
	// RetryFirst is the delivery workflows' first retry wait (WebhookInput.RetryFirst).
	RetryFirst time.Duration
	Logger     *slog.Logger
}

// StartDispatcher runs d until the returned func, which waits for it to stop.
func StartDispatcher(d *Dispatcher) (stop func()) {
	return runLoop(d.Run)
}

// Run dispatches until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) {
	every := d.Every
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := d.once(ctx); err != nil && ctx.Err() == nil {
			d.Logger.Warn("dispatch webhooks", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// dispatchBatch bounds the events one query reads.
const dispatchBatch = 100

// once dispatches the events after the cursor that a webhook may hear, a batch at a time, and
// moves the cursor past each batch, then past the events no webhook hears. With no new event it
// costs two reads and writes nothing.
func (d *Dispatcher) once(ctx context.Context) error {
	after, err := d.Store.WebhookCursor(ctx)
	if err != nil {
		return err
	}
	newest, err := d.Store.NewestEventID(ctx)
	if err != nil || newest <= after {
		return err
	}
	for {
		events, owners, err := d.Store.HookedEvents(ctx, after, newest, dispatchBatch)
		if err != nil {
			return err
		}
		hooks := map[string][]store.Webhook{}
		for i, ev := range events {
			owner := owners[i]
			if _, ok := hooks[owner]; !ok {
				if hooks[owner], err = d.Store.Webhooks(ctx, owner); err != nil {
					return err
				}
			}
			for _, h := range hooks[owner] {
				if wants(h.Events, ev.Action) {
					if err := d.start(ctx, h.ID, ev.ID); err != nil {
						return err // the cursor stays before this batch: its starts are refused as duplicates next time
					}
				}
			}
		}
		if len(events) < dispatchBatch {
			return d.Store.AdvanceWebhookCursor(ctx, newest)
		}
		after = events[len(events)-1].ID
		if err := d.Store.AdvanceWebhookCursor(ctx, after); err != nil {
			return err
		}
	}
}

func (d *Dispatcher) start(ctx context.Context, hookID string, eventID int64) error {
	_, err := d.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: workflows.WebhookWorkflowID(hookID, eventID), TaskQueue: workflows.TaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, workflows.WebhookWorkflow, workflows.WebhookInput{RetryFirst: d.RetryFirst, DeliverInput: activities.DeliverInput{WebhookID: hookID, EventID: eventID}})
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return nil // dispatched before a crash: its delivery is under way or done
	}
	return err
}

// wants reports whether a webhook asking for patterns hears action: a pattern is an action
// (box.hibernated) or a family (box.*, run.*).
func wants(patterns []string, action string) bool {
	for _, p := range patterns {
		if p == action || (strings.HasSuffix(p, ".*") && strings.HasPrefix(action, strings.TrimSuffix(p, "*"))) {
			return true
		}
	}
	return false
}
