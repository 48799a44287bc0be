package engine

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Serve answers the API on ln and runs the background loops until ctx ends, then stops
// accepting requests and gives running ones a few seconds to finish. The caller closes the
// engine afterwards; Close ends relays and commands still open.
func (e *Engine) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler: e.Handler(),
		// No read or write timeout: a cold claim may take a while and a relay streams for as
		// long as its client wants. The header timeout still stops slow-header clients.
		ReadHeaderTimeout: 10 * time.Second,
		// Requests outlive ctx by the shutdown grace below, so they must not inherit its end.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	loops, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.Run(loops) })
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	stop()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if serr := srv.Shutdown(shutdownCtx); serr != nil && !errors.Is(serr, context.DeadlineExceeded) && err == nil {
		err = serr
	}
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
