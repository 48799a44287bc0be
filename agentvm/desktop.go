package agentvm

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/agentvm/tools"
	"github.com/loomhand/cocoonbox/agentvm/tools/desktop"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// desktopService is the Desktop gRPC service: the control plane's desktop verbs over the same
// desktop code the model's desktop tools use, in screen pixels.
type desktopService struct {
	agentvmv1.UnimplementedDesktopServer
	d *desktop.Desktop
}

var _ agentvmv1.DesktopServer = (*desktopService)(nil)

// desktopStatus is the one table from the desktop's errors to gRPC codes: bad arguments are
// INVALID_ARGUMENT naming the field, and a display that
// does not answer (not up yet, xdotool failing) UNAVAILABLE, so a caller may retry.
func desktopStatus(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, tools.ErrInvalid):
		return status.Error(codes.InvalidArgument, invalidField(err))
	default:
		return status.Error(codes.Unavailable, err.Error())
	}
}

// invalidField strips the tool layer's "invalid tool arguments: " prefix: gRPC callers get the
// field and why ("x: must not be negative").
func invalidField(err error) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, tools.ErrInvalid.Error()+": "); ok {
		return rest
	}
	return msg
}

// Screenshot captures the screen as PNG.
func (s *desktopService) Screenshot(ctx context.Context, req *agentvmv1.ScreenshotRequest) (*agentvmv1.ScreenshotResponse, error) {
	shot, err := s.d.Screenshot(ctx, int(req.GetMaxWidth()))
	if err != nil {
		return nil, desktopStatus(ctx, err)
	}
	return &agentvmv1.ScreenshotResponse{
		Png:   shot.PNG,
		Width: int32(shot.Width), Height: int32(shot.Height),
		ScreenWidth: int32(shot.ScreenWidth), ScreenHeight: int32(shot.ScreenHeight),
	}, nil
}

// Click moves the pointer and clicks.
func (s *desktopService) Click(ctx context.Context, req *agentvmv1.ClickRequest) (*agentvmv1.DesktopResponse, error) {
	button, err := desktop.ParseButton(req.GetButton())
	if err == nil {
		err = s.d.Click(ctx, int(req.GetX()), int(req.GetY()), button, req.GetDouble())
	}
	return done(ctx, err)
}

// Move moves the pointer.
func (s *desktopService) Move(ctx context.Context, req *agentvmv1.MoveRequest) (*agentvmv1.DesktopResponse, error) {
	return done(ctx, s.d.Move(ctx, int(req.GetX()), int(req.GetY())))
}

// Type types text at the keyboard focus.
func (s *desktopService) Type(ctx context.Context, req *agentvmv1.TypeRequest) (*agentvmv1.DesktopResponse, error) {
	return done(ctx, s.d.Type(ctx, req.GetText()))
}

// Key presses a key or chord.
func (s *desktopService) Key(ctx context.Context, req *agentvmv1.KeyRequest) (*agentvmv1.DesktopResponse, error) {
	return done(ctx, s.d.Key(ctx, req.GetKeys()))
}

// Scroll scrolls at (x, y).
func (s *desktopService) Scroll(ctx context.Context, req *agentvmv1.ScrollRequest) (*agentvmv1.DesktopResponse, error) {
	return done(ctx, s.d.Scroll(ctx, int(req.GetX()), int(req.GetY()), int(req.GetDx()), int(req.GetDy())))
}

func done(ctx context.Context, err error) (*agentvmv1.DesktopResponse, error) {
	if err != nil {
		return nil, desktopStatus(ctx, err)
	}
	return &agentvmv1.DesktopResponse{}, nil
}
