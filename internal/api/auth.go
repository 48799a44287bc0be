package api

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
)

// Principal is the authenticated caller of a request.
type Principal struct {
	User      store.User
	TokenName string
}

type principalKey struct{}

// PrincipalFrom returns the caller that the auth interceptor attached to ctx.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// authenticate resolves a raw bearer token to a principal.
func (s *Server) authenticate(ctx context.Context, token string) (Principal, error) {
	if token == "" {
		return Principal{}, cocoonbox.Errorf(cocoonbox.EUnauthorized, "missing bearer token: send authorization: Bearer <token>")
	}
	u, t, err := s.store.UserByTokenHash(ctx, store.HashToken(token))
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, cocoonbox.Errorf(cocoonbox.EUnauthorized, "unknown, expired or revoked token")
	}
	if err != nil {
		return Principal{}, &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "cannot check the token now; try again", Err: err}
	}
	return Principal{User: u, TokenName: t.Name}, nil
}

// bearer extracts the token from "authorization: Bearer <token>" metadata.
func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok {
			return strings.TrimSpace(tok)
		}
	}
	return ""
}

func (s *Server) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p, err := s.authenticate(ctx, bearer(ctx))
	if err != nil {
		return nil, toStatus(ctx, s.log, info.FullMethod, err)
	}
	resp, err := handler(context.WithValue(ctx, principalKey{}, p), req)
	return resp, toStatus(ctx, s.log, info.FullMethod, err)
}

func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	p, err := s.authenticate(ctx, bearer(ctx))
	if err != nil {
		return toStatus(ctx, s.log, info.FullMethod, err)
	}
	err = handler(srv, &principalStream{ServerStream: ss, ctx: context.WithValue(ctx, principalKey{}, p)})
	return toStatus(ctx, s.log, info.FullMethod, err)
}

type principalStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (p *principalStream) Context() context.Context { return p.ctx }

// mustPrincipal is for handlers behind the auth interceptor, where a missing principal is a bug.
func mustPrincipal(ctx context.Context) (Principal, error) {
	p, ok := PrincipalFrom(ctx)
	if !ok {
		return Principal{}, status.Error(codes.Unauthenticated, "not authenticated")
	}
	return p, nil
}
