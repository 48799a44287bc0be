package engine

import "context"

// Tick runs one pass of every background loop — reaper, idle sweep, pool filler — and returns
// when it is done, so tests step the engine instead of sleeping for its tickers.
func (e *Engine) Tick(ctx context.Context) {
	e.reap(ctx)
	e.idleSweep(ctx)
	for {
		p, b := e.nextFill()
		if b == nil {
			return
		}
		e.fillOne(ctx, p, b)
	}
}

// AdoptGrace is adoptGrace, for tests.
const AdoptGrace = adoptGrace
