package activities

import (
	"context"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
)

// heartbeatEvery is how often a long engine call reports that its worker is alive. The workflow's
// HeartbeatTimeout is a few of these, so a killed worker's call is retried within seconds rather
// than after the whole StartToCloseTimeout.
const heartbeatEvery = 2 * time.Second

// whileHeartbeating runs call, heartbeating until it returns. Outside an activity (plain unit
// tests) it just runs call.
func whileHeartbeating[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	return withHeartbeats(ctx, nil, call)
}

// withHeartbeats is whileHeartbeating with details: each heartbeat carries what details returns
// (progress, for the Temporal UI and a retry's logs); nil sends none.
func withHeartbeats[T any](ctx context.Context, details func() any, call func(context.Context) (T, error)) (T, error) {
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
				if details != nil {
					activity.RecordHeartbeat(ctx, details())
				} else {
					activity.RecordHeartbeat(ctx)
				}
			}
		}
	}()
	return call(ctx)
}

// logger is the activity's logger, or the default logger outside an activity (plain unit tests).
func logger(ctx context.Context) log.Logger {
	if activity.IsActivity(ctx) {
		return activity.GetLogger(ctx)
	}
	return log.NewStructuredLogger(slog.Default())
}
