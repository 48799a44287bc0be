package api

import (
	"context"

	"github.com/loomhand/cocoonbox/internal/boxsvc"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// ForkBox copies the box with its memory into new boxes of the caller's (admin).
func (b *boxService) ForkBox(ctx context.Context, req *cbv1.ForkBoxRequest) (*cbv1.ForkBoxResponse, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	if ctx, err = withRequest(ctx, req.GetRequestId()); err != nil {
		return nil, err
	}
	forked, err := svc.Fork(ctx, caller, id, boxsvc.ForkRequest{Count: int(req.GetCount()), Name: req.GetName()})
	if err != nil {
		return nil, err
	}
	out := &cbv1.ForkBoxResponse{PausedMs: forked.Paused.Milliseconds()}
	for _, v := range forked.Boxes {
		out.Boxes = append(out.Boxes, boxProto(v))
	}
	return out, nil
}
