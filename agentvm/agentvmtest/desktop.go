package agentvmtest

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// Input is one desktop action the agent was sent, in screen pixels.
type Input struct {
	Verb   string // "click", "move", "type", "key" or "scroll"
	X, Y   int
	DX, DY int    // scroll
	Button string // click, as sent
	Double bool   // click
	Text   string // type: the text; key: the keys
}

// desktop is the Desktop service: it checks arguments as the real desktop does (INVALID_ARGUMENT
// naming the field) and records what it was asked to do.
type desktop struct {
	agentvmv1.UnimplementedDesktopServer
	a *Agent
}

// Screenshot returns a PNG of the screen's size, downscaled to max_width when that is smaller.
func (s desktop) Screenshot(_ context.Context, req *agentvmv1.ScreenshotRequest) (*agentvmv1.ScreenshotResponse, error) {
	if req.GetMaxWidth() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "max_width: must not be negative, got %d", req.GetMaxWidth())
	}
	sw, sh := s.a.opts.ScreenWidth, s.a.opts.ScreenHeight
	w, h := sw, sh
	if m := int(req.GetMaxWidth()); m > 0 && m < sw {
		w, h = m, max(1, sh*m/sw)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{R: uint8(x), G: uint8(y), B: 0x80, A: 0xff})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, status.Errorf(codes.Internal, "encode screenshot: %v", err)
	}
	return &agentvmv1.ScreenshotResponse{Png: buf.Bytes(), Width: int32(w), Height: int32(h),
		ScreenWidth: int32(sw), ScreenHeight: int32(sh)}, nil
}

// Click clicks at (x, y).
func (s desktop) Click(_ context.Context, req *agentvmv1.ClickRequest) (*agentvmv1.DesktopResponse, error) {
	switch req.GetButton() {
	case "", "left", "middle", "right":
	default:
		return nil, status.Errorf(codes.InvalidArgument, "button: must be left, middle or right, not %q", req.GetButton())
	}
	return s.record(Input{Verb: "click", X: int(req.GetX()), Y: int(req.GetY()), Button: req.GetButton(), Double: req.GetDouble()})
}

// Move moves the pointer to (x, y).
func (s desktop) Move(_ context.Context, req *agentvmv1.MoveRequest) (*agentvmv1.DesktopResponse, error) {
	return s.record(Input{Verb: "move", X: int(req.GetX()), Y: int(req.GetY())})
}

// Type types text.
func (s desktop) Type(_ context.Context, req *agentvmv1.TypeRequest) (*agentvmv1.DesktopResponse, error) {
	if req.GetText() == "" {
		return nil, status.Error(codes.InvalidArgument, "text: is required")
	}
	return s.record(Input{Verb: "type", Text: req.GetText()})
}

// Key presses keys.
func (s desktop) Key(_ context.Context, req *agentvmv1.KeyRequest) (*agentvmv1.DesktopResponse, error) {
	if req.GetKeys() == "" {
		return nil, status.Error(codes.InvalidArgument, "keys: is required")
	}
	return s.record(Input{Verb: "key", Text: req.GetKeys()})
}

// Scroll scrolls at (x, y).
func (s desktop) Scroll(_ context.Context, req *agentvmv1.ScrollRequest) (*agentvmv1.DesktopResponse, error) {
	return s.record(Input{Verb: "scroll", X: int(req.GetX()), Y: int(req.GetY()), DX: int(req.GetDx()), DY: int(req.GetDy())})
}

// record keeps in an input whose point is on the screen.
func (s desktop) record(in Input) (*agentvmv1.DesktopResponse, error) {
	sw, sh := s.a.opts.ScreenWidth, s.a.opts.ScreenHeight
	switch {
	case in.X < 0 || in.X >= sw:
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("x: %d is off the screen (width %d)", in.X, sw))
	case in.Y < 0 || in.Y >= sh:
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("y: %d is off the screen (height %d)", in.Y, sh))
	}
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	s.a.inputs = append(s.a.inputs, in)
	return &agentvmv1.DesktopResponse{}, nil
}

// Inputs returns the desktop actions the agent carried out, in order.
func (a *Agent) Inputs() []Input {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Input(nil), a.inputs...)
}
