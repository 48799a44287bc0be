package api

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/store"
)

// Principal is the authenticated caller of a request.
type Principal struct {
	User  store.User
	Token store.Token // the token the request carried
}

type principalKey struct{}

// PrincipalFrom returns the caller that the front door attached to ctx.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

func withPrincipal(ctx context.Context, p Principal) context.Context {
	return boxsvc.WithCallerName(context.WithValue(ctx, principalKey{}, p), p.User.ID, p.User.Name)
}

// authorize is the one authorization path every surface shares (gRPC, Connect, MCP, the desktop
// edge): it resolves a raw bearer token to its caller and checks that the token's scope reaches
// route (a full RPC method name, routeMCP, or routeDesktop and a mode). It runs once per request
// and from the headers alone, so a caller without a valid token costs one indexed lookup.
func (s *Server) authorize(ctx context.Context, token, route string) (Principal, error) {
	if token == "" {
		return Principal{}, cocoonbox.Errorf(cocoonbox.EUnauthorized, "missing bearer token: send authorization: Bearer <token>")
	}
	if s.store == nil {
		return Principal{}, cocoonbox.Errorf(cocoonbox.EUnavailable, "this server checks no tokens")
	}
	u, t, err := s.store.UserByTokenHash(ctx, store.HashToken(token))
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, cocoonbox.Errorf(cocoonbox.EUnauthorized, "unknown, expired or revoked token")
	}
	if err != nil {
		return Principal{}, &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "cannot check the token now: the database (PostgreSQL) is not answering; try again", Err: err}
	}
	if err := allowScope(t.Scope, route); err != nil {
		return Principal{}, err
	}
	return Principal{User: u, Token: t}, nil
}

// unaryAuth passes calls the front door authorized; a call without a principal did not come
// through it, and is refused.
func (s *Server) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if _, err := mustPrincipal(ctx); err != nil {
		return nil, err
	}
	resp, err := handler(ctx, req)
	return resp, toStatus(ctx, s.log, info.FullMethod, err)
}

// streamAuth is unaryAuth for streams, which also end once their token is revoked.
func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	p, err := mustPrincipal(ctx)
	if err != nil {
		return err
	}
	return toStatus(ctx, s.log, info.FullMethod, s.recheckStream(srv, ss, p, handler))
}

// mustPrincipal is for handlers behind the front door, where a missing principal is a bug.
func mustPrincipal(ctx context.Context) (Principal, error) {
	p, ok := PrincipalFrom(ctx)
	if !ok {
		return Principal{}, status.Error(codes.Unauthenticated, "not authenticated")
	}
	return p, nil
}

// Routes that are not RPC methods, as authorize names them.
const (
	routeMCP      = "/mcp"
	routeDesktop  = "desktop:" // + the mode
	routeOperator = "operator" // /healthz details and /metrics, for admin users
)
