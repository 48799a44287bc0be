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
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/health"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/vault"
	"github.com/loomhand/cocoonbox/internal/web"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// Options configures a Server.
type Options struct {
	Store *store.Store
	// Boxes is the service layer every box call (gRPC, Connect, MCP) goes through.
	Boxes *boxsvc.Service
	// Vault keeps users' secrets.
	Vault *vault.Vault
	// Keys seals desktop tickets, so every API replica sharing the keyring opens the others'
	// tickets; nil means a random key per process (tickets open only where they were issued).
	Keys   *secrets.Keyring
	Checks map[string]Check // components reported by /healthz
	// Starting returns nil once the API may serve, or what it still waits for (a
	// *health.WaitError); until then every request but health is refused as unavailable, naming
	// the dependency. Nil serves from the start.
	Starting func() error
	// Recheck is how often an open stream or desktop connection checks that its token still
	// authenticates, so revoking it ends them; 0 is 15 s.
	Recheck time.Duration
	// Now is the clock (the health cache's); nil is time.Now.
	Now     func() time.Time
	Version string
	Logger  *slog.Logger
	// MaxDesktopConns caps the open desktop connections of one box on this process; over it a
	// connection is refused with resource_exhausted. Zero means DefaultMaxDesktopConns.
	MaxDesktopConns int
	// PreviewDomain, when set (host or host:port), serves each box port's preview on a host of
	// its own, p{port}-{box hex}.{PreviewDomain}, which browsers open with a preview ticket.
	PreviewDomain string
}

// DefaultMaxDesktopConns is the per-box cap on desktop connections when none is configured:
// a controller and a room of viewers, not enough for one caller to exhaust the process.
const DefaultMaxDesktopConns = 16

// maxMessageBytes bounds one gRPC message: a file of boxsvc.MaxFileBytes with room for the
// envelope, so an oversized WriteFile reaches the service and is refused naming its field
// instead of failing in the transport.
const maxMessageBytes = 2*boxsvc.MaxFileBytes + 1<<20

// Server serves the public API on one port: gRPC over HTTP/2 (cleartext h2c or TLS from a proxy),
// the same services as Connect, gRPC-Web and JSON for browsers, and plain HTTP routes such as
// /healthz, /metrics and /mcp.
type Server struct {
	store   *store.Store
	boxes   *boxsvc.Service
	vault   *vault.Vault
	keys    *secrets.Keyring // seals desktop tickets
	desktop desktopEdge      // the open desktop connections
	// maxDesktopConns caps one box's desktop connections.
	maxDesktopConns int
	health          *health.Checker // /healthz, gRPC health and the component gauges
	starting        func() error    // see Options.Starting; never nil
	recheck         time.Duration   // how often open streams and desktops check their token again
	version         string
	log             *slog.Logger
	grpc            *grpc.Server
	healthz         *healthServer
	rpc             http.Handler               // gRPC, behind the front door
	connect         http.Handler               // Connect, gRPC-Web and JSON, behind the front door, transcoded into s.grpc
	methods         map[string]grpc.MethodInfo // every RPC method by its full name: how it streams
	metrics         *metrics
	mux             *http.ServeMux
	routes          http.Handler // mux behind panic recovery
	previews        http.Handler // servePreviewHost behind panic recovery
	previewDomain   string       // lower case; empty: no host-based previews
}

// New builds a Server and registers its services.
func New(opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		store: opts.Store, boxes: opts.Boxes, vault: opts.Vault,
		version: opts.Version, log: log, mux: http.NewServeMux(), metrics: newMetrics(), keys: opts.Keys,
		previewDomain: strings.ToLower(opts.PreviewDomain),
	}
	if s.starting = opts.Starting; s.starting == nil {
		s.starting = func() error { return nil }
	}
	s.health = &health.Checker{
		Checks: opts.Checks, Version: opts.Version, Now: opts.Now, Starting: opts.Starting,
		OnPanic: func(ctx context.Context, name string, v any) string {
			_ = s.panicError(ctx, "health check "+name, v)
			return "internal error"
		},
	}
	if s.recheck = opts.Recheck; s.recheck <= 0 {
		s.recheck = defaultRecheck
	}
	if s.keys == nil {
		s.keys, _ = ephemeralKeyring() // nil only if crypto/rand fails; tickets then fail closed
	}
	s.desktop.source = viewerSource()
	s.maxDesktopConns = opts.MaxDesktopConns
	if s.maxDesktopConns <= 0 {
		s.maxDesktopConns = DefaultMaxDesktopConns
	}
	s.grpc = grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.recoverUnary, s.unary),
		grpc.ChainStreamInterceptor(s.recoverStream, s.stream),
		grpc.MaxRecvMsgSize(maxMessageBytes),
		grpc.MaxSendMsgSize(maxMessageBytes),
	)
	cbv1.RegisterAccountServiceServer(s.grpc, &accountService{s: s})
	cbv1.RegisterBoxServiceServer(s.grpc, &boxService{s: s})
	cbv1.RegisterAgentServiceServer(s.grpc, &agentService{s: s})
	cbv1.RegisterVaultServiceServer(s.grpc, &vaultService{s: s})
	s.healthz = newHealthServer(s)
	healthpb.RegisterHealthServer(s.grpc, s.healthz)
	reflection.Register(s.grpc)
	s.methods = methodKinds(s.grpc.GetServiceInfo())
	s.rpc = s.rpcDoor(s.grpc)
	s.connect = s.newConnectHandler()

	s.mux.HandleFunc("GET /healthz", s.serveHealth)
	s.mux.Handle("GET /metrics", s.operatorOnly(http.HandlerFunc(s.serveMetrics)))
	s.mux.Handle("/mcp", s.mcpHandler())
	s.mux.HandleFunc("GET /v1/boxes/{id}/desktop", s.serveDesktop)
	s.mux.HandleFunc("GET /v1/boxes/{id}/terminal", s.serveTerminal)
	s.mux.HandleFunc("GET /v1/boxes/{id}/files/{path...}", s.serveFile)
	s.mux.HandleFunc("GET /v1/runs/{id}/recording", s.serveReplay)
	s.mux.HandleFunc("GET /v1/runs/{id}/recording/{seq}", s.serveReplay)
	s.mux.HandleFunc("PUT /v1/boxes/{id}/files/{path...}", s.serveFile)
	s.mux.HandleFunc("GET /v1/boxes/{id}/ports/{port}", s.servePort)
	s.mux.HandleFunc("/v1/boxes/{id}/ports/{port}/{path...}", s.servePreview)
	// The browser app: "/" without a method, because "GET /" would conflict with the method-less
	// "/mcp" (ServeMux panics on such ambiguity); every route above wins over it.
	s.mux.Handle("/", web.Handler())
	s.routes = s.recoverHTTP(s.mux)
	s.previews = s.recoverHTTP(http.HandlerFunc(s.servePreviewHost))
	return s
}

// Handler routes each request by protocol: gRPC (HTTP/2, application/grpc) to the gRPC server;
// Connect, gRPC-Web and JSON calls of the RPC services to the transcoder, which hands them to
// the same gRPC server; both through the front door (rpcDoor), which authorizes them before
// their bodies are read; everything else to the HTTP routes.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.starting(); err != nil && !servesWhileStarting(r) {
			refuseStarting(w, r, err)
			return
		}
		ct := r.Header.Get("Content-Type")
		if _, _, ok := s.previewTarget(r.Host); ok {
			s.previews.ServeHTTP(w, r) // a box port's own origin: nothing else is served there
			return
		}
		switch {
		case r.ProtoMajor == 2 && strings.HasPrefix(ct, "application/grpc") && !strings.HasPrefix(ct, "application/grpc-web"):
			s.rpc.ServeHTTP(w, r)
		case isRPCPath(r.URL.Path):
			s.connect.ServeHTTP(w, r)
		default:
			s.routes.ServeHTTP(w, r)
		}
	})
}

// rpcPrefixes are the paths of the services browsers reach through the transcoder. Reflection
// is bidirectional streaming and stays gRPC-only.
var rpcPrefixes = []string{"/cocoonbox.v1.", "/grpc.health.v1."}

func isRPCPath(p string) bool {
	for _, pre := range rpcPrefixes {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	return false
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
		// No ReadTimeout: it would cut streams and the desktop's WebSocket; the front door gives
		// a unary body its own deadline instead (bodyDeadline).
		IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	go s.healthz.refresh(ctx)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.healthz.Shutdown() // tell watchers the server is going away
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	s.grpc.Stop() // streams hijacked by gRPC are not closed by Shutdown
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// healthRefresh is how often the gRPC health service re-runs the checks for its watchers.
const healthRefresh = 15 * time.Second

// healthServer is gRPC's standard health service whose answers are the /healthz checks: the
// whole server ("") and each cocoonbox service are SERVING exactly when every check passes.
// Check and List answer from the same cached result as /healthz (at most healthEvery old), since
// they need no token; Watch streams see the periodic refresh.
type healthServer struct {
	*grpchealth.Server
	s *Server
}

func newHealthServer(s *Server) *healthServer {
	h := &healthServer{Server: grpchealth.NewServer(), s: s}
	for _, name := range h.services() {
		h.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	return h
}

// services are the names the health service answers for.
func (h *healthServer) services() []string {
	return []string{"", cbv1.AccountService_ServiceDesc.ServiceName, cbv1.BoxService_ServiceDesc.ServiceName,
		cbv1.AgentService_ServiceDesc.ServiceName, cbv1.VaultService_ServiceDesc.ServiceName}
}

func (h *healthServer) update(ctx context.Context) {
	st := healthpb.HealthCheckResponse_SERVING
	if h.s.health.Report(ctx).Status != health.StatusOK {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, name := range h.services() {
		h.SetServingStatus(name, st)
	}
}

// Check answers for one service from a fresh enough result.
func (h *healthServer) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.update(ctx)
	return h.Server.Check(ctx, req)
}

// List answers for every service from a fresh enough result.
func (h *healthServer) List(ctx context.Context, req *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	h.update(ctx)
	return h.Server.List(ctx, req)
}

// refresh re-runs the checks until ctx ends, so watchers learn of a change.
func (h *healthServer) refresh(ctx context.Context) {
	t := time.NewTicker(healthRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.update(ctx)
		}
	}
}
