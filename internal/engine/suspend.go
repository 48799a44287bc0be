package engine

import (
	"context"
	"errors"
	"fmt"
)

// Suspend hibernates every claimed box and discards the warm ones, so that a machine-local
// engine can stop without leaving sandboxes running: `cocoonbox dev` calls it on Ctrl-C, and the
// next start re-adopts the hibernated boxes (they wake on their next use) and refills the pools.
// A box that cannot hibernate is left running and named in the error.
func (e *Engine) Suspend(ctx context.Context) error {
	e.mu.Lock()
	boxes := make([]*box, 0, len(e.boxes))
	for _, b := range e.boxes {
		boxes = append(boxes, b)
	}
	e.mu.Unlock()
	var errs []error
	for _, b := range boxes {
		r, gone := b.snapshot()
		switch {
		case gone:
		case r.Warm:
			e.discard(ctx, b)
		case !r.Hibernated:
			if err := e.hibernate(ctx, b, "suspend"); err != nil && !errors.Is(err, errUnknownSandbox) {
				errs = append(errs, fmt.Errorf("hibernate %s: %w", r.ID, err))
			}
		}
	}
	return errors.Join(errs...)
}
