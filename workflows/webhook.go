package workflows

import (
	"strconv"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/loomhand/cocoonbox/activities"
)

var hookActs *activities.Webhooks

// WebhookWorkflowID is the workflow that delivers event eventID to webhook webhookID: one per
// pair, so dispatching an event twice delivers it once.
func WebhookWorkflowID(webhookID string, eventID int64) string {
	return "webhook/" + webhookID + "/" + strconv.FormatInt(eventID, 10)
}

// WebhookInput is the delivery workflow's input.
type WebhookInput struct {
	activities.DeliverInput
	// RetryFirst is the wait before the first retry, doubling to WebhookRetryMax; 0 is
	// DefaultWebhookRetryFirst.
	RetryFirst time.Duration
}

// Delivery retries of a webhook.
const (
	DefaultWebhookRetryFirst = 10 * time.Second
	WebhookRetryMax          = 10 * time.Minute
	WebhookAttempts          = 8
)

// WebhookWorkflow delivers one event to one webhook, retrying with backoff as a Temporal
// activity; each attempt is in the webhook's delivery log. A delivery that never lands ends
// after WebhookAttempts, the log saying why.
func WebhookWorkflow(ctx workflow.Context, in WebhookInput) error {
	first := in.RetryFirst
	if first <= 0 {
		first = DefaultWebhookRetryFirst
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: first, BackoffCoefficient: 2, MaximumInterval: WebhookRetryMax,
			MaximumAttempts: WebhookAttempts, NonRetryableErrorTypes: activities.NonRetryableErrorTypes(),
		},
	})
	return workflow.ExecuteActivity(ctx, hookActs.Deliver, in.DeliverInput).Get(ctx, nil)
}
