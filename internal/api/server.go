package api

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/loomhand/cocoonbox/internal/store"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// Options configures a Server.
type Options struct {
	Store   *store.Store
	Checks  map[string]Check // components reported by /healthz
	Version string
	Logger  *slog.Logger
}

// Server serves the public API on one port: gRPC over HTTP/2 (cleartext h2c or TLS from a proxy)
// and plain HTTP routes such as /healthz.
type Server struct {
	store   *store.Store
	checks  map[string]Check
	version string
	log     *slog.Logger
	grpc    *grpc.Server
	mux     *http.ServeMux
}

// New builds a Server and registers its services.
func New(opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{store: opts.Store, checks: opts.Checks, version: opts.Version, log: log, mux: http.NewServeMux()}
	s.grpc = grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.unaryAuth),
		grpc.ChainStreamInterceptor(s.streamAuth),
	)
	cbv1.RegisterAccountServiceServer(s.grpc, &accountService{s: s})
	s.mux.HandleFunc("GET /healthz", s.serveHealth)
	return s
}

// Handler routes gRPC requests to the gRPC server and everything else to the HTTP routes.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			s.grpc.ServeHTTP(w, r)
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

// Serve answers on ln until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC clients speak h2c with prior knowledge
	srv := &http.Server{
		Handler:           s.Handler(),
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	s.grpc.Stop() // streams hijacked by gRPC are not closed by Shutdown
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
