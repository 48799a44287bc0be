package boxsvc

import (
	"context"
	"reflect"
	"time"

	"github.com/loomhand/cocoonbox"
)

// Watch calls send with the box's view now and again after every change, until ctx ends, send
// fails, or the box is deleted (viewer). It polls the workflow's status query, which is cheap and
// needs nothing from the workflow; a caller's role is checked again at every poll, so a revoked
// share ends the watch. A user's open streams in this process are bounded by Quota.Streams.
func (s *Service) Watch(ctx context.Context, caller string, id cocoonbox.BoxID, send func(View) error) error {
	release, err := s.streams.take(caller, s.Quota.Streams, limitStreams)
	if err != nil {
		return err
	}
	defer release()
	every := s.WatchEvery
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	var last *View
	// A driver's watch carries the box's events as they come, from those after the newest now.
	events, after := false, int64(0)
	if newest, err := s.ListEvents(ctx, caller, id, 0, 1); err == nil {
		events = true
		if len(newest) > 0 {
			after = newest[0].ID
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		v, err := s.Get(ctx, caller, id)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if last != nil && last.State == cocoonbox.BoxStateDeleted {
				return nil
			}
			return err
		}
		v.IdleDeadline = v.IdleDeadline.Truncate(time.Second) // the clock alone is not a change
		if events && last != nil {
			if v.Events, err = s.ListEvents(ctx, caller, id, after, MaxEvents); err != nil && ctx.Err() == nil {
				return err
			}
			if n := len(v.Events); n > 0 {
				after = v.Events[n-1].ID
			}
		}
		if last == nil || len(v.Events) > 0 || !reflect.DeepEqual(*last, v) {
			if err := send(v); err != nil {
				return err
			}
			v.Events = nil // what the next view is compared with: its status, not these events
			last = &v
		}
		if v.State == cocoonbox.BoxStateDeleted {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
