package api

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

type accountService struct {
	cbv1.UnimplementedAccountServiceServer
	s *Server
}

// WhoAmI returns the caller.
func (a *accountService) WhoAmI(ctx context.Context, _ *cbv1.WhoAmIRequest) (*cbv1.WhoAmIResponse, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	return &cbv1.WhoAmIResponse{
		User: &cbv1.User{
			Id:        p.User.ID,
			Name:      p.User.Name,
			Admin:     p.User.Admin,
			CreatedAt: timestamppb.New(p.User.CreatedAt),
		},
		TokenName: p.TokenName,
	}, nil
}
