package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/store"
)

// RecordingRetention deletes runs' desktop recordings past their retention (config.Recordings):
// the chunks first, then the row, so a pass cut short leaves a row whose next pass finishes it.
type RecordingRetention struct {
	Store *store.Store
	Blobs objstore.Store
	Keep  config.Recordings
	// Every is how often it looks; 0 is an hour.
	Every  time.Duration
	Logger *slog.Logger
	Now    func() time.Time
}

// StartRecordingRetention runs r until the returned func, which waits for it to stop.
func StartRecordingRetention(r *RecordingRetention) (stop func()) {
	return runLoop(func(ctx context.Context) {
		every := r.Every
		if every <= 0 {
			every = time.Hour
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if n, err := r.Once(ctx); err != nil && ctx.Err() == nil {
				r.Logger.Warn("recording retention", "error", err)
			} else if n > 0 {
				r.Logger.Info("deleted recordings past their retention", "recordings", n)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// Once deletes one batch of expired recordings and says how many.
func (r *RecordingRetention) Once(ctx context.Context) (int, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	before := time.Time{}
	if r.Keep.MaxAge > 0 {
		before = now().Add(-r.Keep.MaxAge)
	}
	expired, err := r.Store.ExpiredRecordings(ctx, before, int64(r.Keep.MaxBoxMB)<<20, reconcileBatch)
	if err != nil {
		return 0, err
	}
	for i, rec := range expired {
		for seq := range rec.Chunks {
			if err := r.Blobs.Delete(ctx, objstore.RecordingKey(rec.RunID, seq)); err != nil {
				return i, err
			}
		}
		if err := r.Store.DeleteRecording(ctx, rec.RunID); err != nil {
			return i, err
		}
	}
	return len(expired), nil
}
