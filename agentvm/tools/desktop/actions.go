package desktop

import (
	"context"
	"fmt"
	"image"
	"strconv"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox/agentvm/tools"
)

// The typed actions below are the desktop as the control plane drives it (the agent's Desktop
// gRPC service), in screen pixels; the JSON tools the model calls are thin adapters over the
// same code, in screenshot pixels. Errors wrap tools.ErrInvalid for bad arguments (naming the
// field); anything else is the display failing. Whether a person holds control is the agent's
// to decide (agentvm.Loop), not these actions'.

// Buttons of the pointer, as X numbers them.
const (
	ButtonLeft   = 1
	ButtonMiddle = 2
	ButtonRight  = 3
)

// ParseButton maps "left" (or ""), "middle" and "right" to an X button number.
func ParseButton(name string) (int, error) {
	switch name {
	case "", "left":
		return ButtonLeft, nil
	case "middle":
		return ButtonMiddle, nil
	case "right":
		return ButtonRight, nil
	}
	return 0, tools.Invalid("button", fmt.Sprintf("%q is not left, middle or right", name))
}

// Shot is a screenshot.
type Shot struct {
	PNG []byte
	// Width and Height are the image's; ScreenWidth and ScreenHeight the screen's.
	Width, Height             int
	ScreenWidth, ScreenHeight int
	image                     image.Image // what PNG encodes, for its thumbnail
}

// Screenshot captures the screen as PNG, downscaled to maxWidth when that is smaller; 0 keeps
// the full size. Looking is allowed while a person holds control.
func (d *Desktop) Screenshot(ctx context.Context, maxWidth int) (Shot, error) {
	if maxWidth < 0 {
		return Shot{}, tools.Invalid("max_width", "must not be negative")
	}
	return d.ScreenshotFit(ctx, tools.Fit{MaxWidth: maxWidth})
}

// ScreenshotFit is Screenshot scaled to fit (the zero Fit keeps the full size).
func (d *Desktop) ScreenshotFit(ctx context.Context, fit tools.Fit) (Shot, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	img, err := d.cfg.Screen.Capture(ctx)
	if err != nil {
		return Shot{}, fmt.Errorf("desktop screenshot: %w", err)
	}
	small := fit.Scale(img)
	out, err := tools.EncodePNG(small)
	if err != nil {
		return Shot{}, fmt.Errorf("desktop screenshot: encode: %w", err)
	}
	b, sb := small.Bounds(), img.Bounds()
	return Shot{PNG: out, Width: b.Dx(), Height: b.Dy(), ScreenWidth: sb.Dx(), ScreenHeight: sb.Dy(), image: small}, nil
}

// Click moves the pointer to (x, y) and clicks button (ButtonLeft...), twice when double.
func (d *Desktop) Click(ctx context.Context, x, y, button int, double bool) error {
	return d.click(ctx, x, y, button, double, tools.Fit{})
}

// Move moves the pointer to (x, y).
func (d *Desktop) Move(ctx context.Context, x, y int) error {
	return d.move(ctx, x, y, tools.Fit{})
}

// Type types text at the keyboard focus, newlines included.
func (d *Desktop) Type(ctx context.Context, text string) error {
	n := len([]rune(text))
	if n == 0 {
		return tools.Invalid("text", "must not be empty")
	}
	if n > maxTypeRunes {
		return tools.Invalid("text", fmt.Sprintf("%d characters; at most %d a call", n, maxTypeRunes))
	}
	timeout := d.cfg.Timeout + time.Duration(n)*typeDelay
	return d.input(ctx, timeout, "type", "--delay", strconv.Itoa(int(typeDelay/time.Millisecond)), "--", text)
}

// Key presses keys: keysym names joined by "+", several separated by spaces ("ctrl+l Return").
func (d *Desktop) Key(ctx context.Context, keys string) error {
	norm := strings.Join(strings.Fields(keys), " ")
	if norm == "" {
		return tools.Invalid("keys", "must not be empty")
	}
	if !keysPattern.MatchString(norm) || len(norm) > 200 {
		return tools.Invalid("keys", fmt.Sprintf("%q is not keysym names joined by + and separated by spaces", keys))
	}
	return d.input(ctx, d.cfg.Timeout, append([]string{"key"}, strings.Fields(norm)...)...)
}

// Scroll moves the pointer to (x, y) and scrolls by dx, dy wheel steps (positive: right, down).
func (d *Desktop) Scroll(ctx context.Context, x, y, dx, dy int) error {
	return d.scroll(ctx, &x, &y, dx, dy, tools.Fit{})
}

// click is Click with (x, y) in the pixels of a screenshot scaled to fit (the zero Fit: screen
// pixels).
func (d *Desktop) click(ctx context.Context, x, y, button int, double bool, fit tools.Fit) error {
	if button < ButtonLeft || button > ButtonRight {
		return tools.Invalid("button", "must be 1 (left), 2 (middle) or 3 (right)")
	}
	sx, sy, err := d.locate(ctx, x, y, fit)
	if err != nil {
		return err
	}
	args := []string{"mousemove", strconv.Itoa(sx), strconv.Itoa(sy), "click"}
	if double {
		args = append(args, "--repeat", "2")
	}
	return d.input(ctx, d.cfg.Timeout, append(args, strconv.Itoa(button))...)
}

func (d *Desktop) move(ctx context.Context, x, y int, fit tools.Fit) error {
	sx, sy, err := d.locate(ctx, x, y, fit)
	if err != nil {
		return err
	}
	return d.input(ctx, d.cfg.Timeout, "mousemove", strconv.Itoa(sx), strconv.Itoa(sy))
}

// scroll scrolls by dx, dy at (x, y), or where the pointer is when x and y are nil.
func (d *Desktop) scroll(ctx context.Context, x, y *int, dx, dy int, fit tools.Fit) error {
	if dx < -maxScrollSteps || dx > maxScrollSteps {
		return tools.Invalid("dx", fmt.Sprintf("must be between %d and %d", -maxScrollSteps, maxScrollSteps))
	}
	if dy < -maxScrollSteps || dy > maxScrollSteps {
		return tools.Invalid("dy", fmt.Sprintf("must be between %d and %d", -maxScrollSteps, maxScrollSteps))
	}
	if dx == 0 && dy == 0 {
		return tools.Invalid("dy", "dx and dy are both zero")
	}
	var cmd []string
	if x != nil && y != nil {
		sx, sy, err := d.locate(ctx, *x, *y, fit)
		if err != nil {
			return err
		}
		cmd = append(cmd, "mousemove", strconv.Itoa(sx), strconv.Itoa(sy))
	}
	// X has no scroll events: wheel steps are clicks of buttons 4 (up), 5 (down), 6 (left), 7 (right).
	if dy != 0 {
		cmd = append(cmd, "click", "--repeat", strconv.Itoa(abs(dy)), wheel(dy, "4", "5"))
	}
	if dx != 0 {
		cmd = append(cmd, "click", "--repeat", strconv.Itoa(abs(dx)), wheel(dx, "6", "7"))
	}
	return d.input(ctx, d.cfg.Timeout, cmd...)
}

// input runs one input action: xdotool with args.
func (d *Desktop) input(ctx context.Context, timeout time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := d.cfg.Run(ctx, args...)
	if err != nil {
		return fmt.Errorf("xdotool %s: %w: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}

// locate validates (x, y) and maps it to screen pixels: the point is in the pixels of a
// screenshot scaled to fit (the model's view; the zero Fit: screen pixels).
func (d *Desktop) locate(ctx context.Context, x, y int, fit tools.Fit) (int, int, error) {
	if x < 0 {
		return 0, 0, tools.Invalid("x", "must not be negative")
	}
	if y < 0 {
		return 0, 0, tools.Invalid("y", "must not be negative")
	}
	sctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	w, h, err := d.cfg.Screen.Size(sctx)
	if err != nil {
		return 0, 0, fmt.Errorf("desktop: %w", err)
	}
	vw, vh := fit.Size(w, h)
	if x >= vw {
		return 0, 0, tools.Invalid("x", fmt.Sprintf("%d is off the screen (width %d)", x, vw))
	}
	if y >= vh {
		return 0, 0, tools.Invalid("y", fmt.Sprintf("%d is off the screen (height %d)", y, vh))
	}
	return tools.ToScreen(x, vw, w), tools.ToScreen(y, vh, h), nil
}

func wheel(v int, neg, pos string) string {
	if v < 0 {
		return neg
	}
	return pos
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
