package api

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"

	"google.golang.org/grpc"

	"github.com/loomhand/cocoonbox"
)

// A panic in one request must not take the whole API down: grpc-go does not recover handler
// panics at all (the process dies), and net/http only drops the connection. Every entry point
// therefore recovers, logs the panic with its stack, and answers internal.

// panicError is a recovered panic as an internal error: the client reads "internal error", the
// log has the value and the stack.
func (s *Server) panicError(ctx context.Context, where string, v any) error {
	s.log.ErrorContext(ctx, "panic", "where", where, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	return cocoonbox.Errorf(cocoonbox.EInternal, "panic in %s: %v", where, v)
}

// recoverUnary is the outermost unary interceptor.
func (s *Server) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			resp, err = nil, toStatus(ctx, s.log, info.FullMethod, s.panicError(ctx, info.FullMethod, v))
		}
	}()
	return handler(ctx, req)
}

// recoverStream is recoverUnary's counterpart for streaming calls.
func (s *Server) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = toStatus(ss.Context(), s.log, info.FullMethod, s.panicError(ss.Context(), info.FullMethod, v))
		}
	}()
	return handler(srv, ss)
}

// recoverHTTP wraps the plain HTTP routes (MCP, web, desktop, health, metrics). A handler that
// panics before answering gets a 500; one that already answered, or hijacked its connection
// for a WebSocket, has its connection closed by net/http, since nothing more can be said on it.
func (s *Server) recoverHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &answerWriter{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { //nolint:errorlint // net/http compares the value itself
				panic(v) // a deliberate abort, not a bug
			}
			err := s.panicError(r.Context(), r.URL.Path, v)
			if rw.answered {
				panic(http.ErrAbortHandler) // closes the connection without a second log line
			}
			s.writeHTTPError(w, r, err)
		}()
		next.ServeHTTP(rw, r)
	})
}

// answerWriter notes whether a handler started its answer. It unwraps for
// http.ResponseController, and passes Flush and Hijack through, which the MCP and desktop
// handlers use.
type answerWriter struct {
	http.ResponseWriter
	answered bool
}

func (w *answerWriter) WriteHeader(code int) {
	w.answered = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerWriter) Write(p []byte) (int, error) {
	w.answered = true
	return w.ResponseWriter.Write(p)
}

// Flush sends what is buffered.
func (w *answerWriter) Flush() {
	w.answered = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the server's ResponseWriter, for http.ResponseController (hijack, deadlines).
func (w *answerWriter) Unwrap() http.ResponseWriter {
	w.answered = true // whoever unwraps may hijack or write around us
	return w.ResponseWriter
}
