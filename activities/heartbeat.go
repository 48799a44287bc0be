package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
)

// heartbeatEvery is how often a long engine call reports that its worker is alive. The workflow's
// HeartbeatTimeout is a few of these, so a killed worker's call is retried within seconds rather
// than after the whole StartToCloseTimeout.
const heartbeatEvery = 2 * time.Second

// whileHeartbeating runs call, heartbeating until it returns. Outside an activity (plain unit
// tests) it just runs call.
func whileHeartbeating[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	if !activity.IsActivity(ctx) {
		return call(ctx)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(heartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return call(ctx)
}
