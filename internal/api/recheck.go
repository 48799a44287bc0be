package api

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"

	"github.com/loomhand/cocoonbox"
)

// A token is checked when a request arrives; a stream or a desktop connection can outlast it.
// So each open one checks its token again every recheck interval, and ends once the token is
// revoked or expired: revoking a leaked token ends what it opened within one interval.

// defaultRecheck is the recheck interval unless Options.Recheck says otherwise: the desktop
// edge's interval for its access checks.
const defaultRecheck = desktopRecheck

// errTokenGone ends a stream or connection whose token stopped authenticating.
var errTokenGone = cocoonbox.Errorf(cocoonbox.EUnauthorized, "the token was revoked or expired")

// checkToken returns errTokenGone when token id no longer authenticates; unavailable when that
// cannot be known now (an open stream then goes on).
func (s *Server) checkToken(ctx context.Context, id string) error {
	ok, err := s.store.TokenUsable(ctx, id)
	if err != nil {
		return &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "cannot check the token now: the database (PostgreSQL) is not answering", Err: err}
	}
	if !ok {
		return errTokenGone
	}
	return nil
}

// watchToken returns a context that ends, with errTokenGone as its cause, at the first recheck
// that finds token id gone; stop ends the watch.
func (s *Server) watchToken(ctx context.Context, id string) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		t := time.NewTicker(s.recheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := s.checkToken(ctx, id); errors.Is(err, errTokenGone) {
					cancel(err)
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

// recheckStream runs a stream's handler under watchToken, and ends the stream with
// UNAUTHENTICATED when its token goes, whatever the handler made of its context ending.
func (s *Server) recheckStream(srv any, ss grpc.ServerStream, p Principal, handler grpc.StreamHandler) error {
	ctx, stop := s.watchToken(ss.Context(), p.Token.ID)
	defer stop()
	err := handler(srv, &ctxStream{ServerStream: ss, ctx: ctx})
	if cause := context.Cause(ctx); errors.Is(cause, errTokenGone) {
		return cause
	}
	return err
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c *ctxStream) Context() context.Context { return c.ctx }
