// Package desktop gives the agent the box's X display as tools: screenshots read over the X
// protocol, pointer and keyboard driven with xdotool (in the desktop image), so whatever a person
// watching over VNC sees is what the agent sees and acts on.
package desktop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox/agentvm/tools"
)

// Defaults of Config's zero fields, and the bounds of arguments.
const (
	DefaultDisplay  = ":0"
	DefaultMaxWidth = 1280
	DefaultTimeout  = 10 * time.Second
	maxTypeRunes    = 2000
	maxScrollSteps  = 50
	typeDelay       = 12 * time.Millisecond
	managedPoll     = 200 * time.Millisecond
)

// Runner runs xdotool with args and returns its combined output.
type Runner func(ctx context.Context, args ...string) ([]byte, error)

// Screen is the display the tools look at.
type Screen interface {
	// Size is the screen's size in pixels.
	Size(ctx context.Context) (width, height int, err error)
	// Capture grabs the whole screen.
	Capture(ctx context.Context) (image.Image, error)
	// WindowManager names the window manager managing the screen; "" while there is none.
	WindowManager(ctx context.Context) (string, error)
}

// Config says which display to drive and who may drive it.
type Config struct {
	// Display is the X display, ":0" if empty.
	Display string
	// Run runs xdotool; nil execs it with DISPLAY set. Tests inject a fake.
	Run Runner
	// Screen captures the display; nil reads Display over the X protocol.
	Screen Screen
	// MaxWidth is the widest screenshot the tools hand out where the caller set no Fit
	// (tools.WithFit: the agent loop sets its model provider's); wider screens are downscaled
	// and the coordinates the tools are given, in screenshot pixels, are scaled back.
	MaxWidth int
	// Timeout bounds each call (typing gets more, in proportion to the text).
	Timeout time.Duration
}

// Desktop is the box's display as the agent uses it.
type Desktop struct{ cfg Config }

// New returns a Desktop over cfg, with defaults for its zero fields.
func New(cfg Config) *Desktop {
	if cfg.Display == "" {
		cfg.Display = DefaultDisplay
	}
	if cfg.Run == nil {
		display := cfg.Display
		cfg.Run = func(ctx context.Context, args ...string) ([]byte, error) {
			cmd := exec.CommandContext(ctx, "xdotool", args...)
			cmd.Env = append(os.Environ(), "DISPLAY="+display)
			cmd.WaitDelay = time.Second
			return cmd.CombinedOutput()
		}
	}
	if cfg.Screen == nil {
		cfg.Screen = xScreen{display: cfg.Display}
	}
	if cfg.MaxWidth <= 0 {
		cfg.MaxWidth = DefaultMaxWidth
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Desktop{cfg: cfg}
}

// Tools returns the desktop tools.
func (d *Desktop) Tools() []tools.Tool {
	const xy = `"x":{"type":"integer","minimum":0,"description":"pixels from the screenshot's left edge"},"y":{"type":"integer","minimum":0,"description":"pixels from the screenshot's top edge"}`
	return append([]tools.Tool{
		tools.Func("desktop_screenshot", "Take a PNG screenshot of the whole desktop. Coordinates the other desktop tools take are pixels of this screenshot.",
			`{"type":"object","properties":{},"additionalProperties":false}`, d.screenshot),
		tools.Func("desktop_click", "Move the pointer to (x, y) on the desktop and click a mouse button (1 left, 2 middle, 3 right; default 1).",
			`{"type":"object","properties":{`+xy+`,"button":{"type":"integer","minimum":1,"maximum":3}},"required":["x","y"],"additionalProperties":false}`, d.clickTool),
		tools.Func("desktop_move", "Move the pointer to (x, y) on the desktop without clicking.",
			`{"type":"object","properties":{`+xy+`},"required":["x","y"],"additionalProperties":false}`, d.moveTool),
		tools.Func("desktop_type", "Type text on the desktop's keyboard into the focused window.",
			`{"type":"object","properties":{"text":{"type":"string","maxLength":2000}},"required":["text"],"additionalProperties":false}`, d.typeTool),
		tools.Func("desktop_key", `Press a key or key combination, X keysym names joined by "+", several separated by spaces: "Return", "ctrl+l", "alt+Tab", "ctrl+a BackSpace".`,
			`{"type":"object","properties":{"keys":{"type":"string"}},"required":["keys"],"additionalProperties":false}`, d.keyTool),
		tools.Func("desktop_scroll", "Scroll the window under the pointer: dy steps down (negative up), dx steps right (negative left).",
			`{"type":"object","properties":{"dx":{"type":"integer","minimum":-50,"maximum":50},"dy":{"type":"integer","minimum":-50,"maximum":50}},"additionalProperties":false}`, d.scrollTool),
	}, d.reachTools()...)
}

// view is the screen's size and the size of its screenshots under ctx's fit.
func (d *Desktop) view(ctx context.Context) (w, h, vw, vh int, err error) {
	sctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	if w, h, err = d.cfg.Screen.Size(sctx); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("desktop: %w", err)
	}
	vw, vh = d.fit(ctx).Size(w, h)
	return w, h, vw, vh, nil
}

// fit is how the tools called under ctx scale screenshots: the caller's Fit, or MaxWidth.
func (d *Desktop) fit(ctx context.Context) tools.Fit {
	return tools.FitOf(ctx, tools.Fit{MaxWidth: d.cfg.MaxWidth})
}

// WindowManager names the window manager managing the display; "" while there is none, as in
// the first seconds of a desktop session.
func (d *Desktop) WindowManager(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	return d.cfg.Screen.WindowManager(ctx)
}

// WaitManaged waits until a window manager manages the display and names it. Windows mapped
// before then stay invisible to a person watching until it does (XFCE's manager announces itself
// seconds after its session starts), so whatever opens the first window waits here.
func (d *Desktop) WaitManaged(ctx context.Context) (string, error) {
	tick := time.NewTicker(managedPoll)
	defer tick.Stop()
	for {
		wm, err := d.WindowManager(ctx)
		if wm != "" {
			return wm, nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return "", fmt.Errorf("wait for a window manager: %w (last: %w)", ctx.Err(), err)
			}
			return "", fmt.Errorf("wait for a window manager: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// result turns an action's outcome into what the model sees: invalid arguments stay an error,
// a failing display becomes an error result, success says done.
func result(err error, done string) (tools.Result, error) {
	switch {
	case err == nil:
		return tools.Result{Text: done}, nil
	case errors.Is(err, tools.ErrInvalid):
		return tools.Result{}, err
	default:
		return tools.Result{Text: err.Error(), IsError: true}, nil
	}
}

// xy checks the point a tool call names is complete.
func needXY(x, y *int) error {
	if x == nil {
		return tools.Invalid("x", "is required")
	}
	if y == nil {
		return tools.Invalid("y", "is required")
	}
	return nil
}

func (d *Desktop) screenshot(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct{}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	shot, err := d.ScreenshotFit(ctx, d.fit(ctx))
	if err != nil {
		return result(err, "")
	}
	return tools.Result{Text: fmt.Sprintf("desktop %dx%d", shot.Width, shot.Height), Images: [][]byte{shot.PNG},
		Thumbs: [][]byte{tools.Thumb(shot.image)}}, nil
}

func (d *Desktop) clickTool(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		X      *int `json:"x"`
		Y      *int `json:"y"`
		Button *int `json:"button"`
	}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	button := ButtonLeft
	if a.Button != nil {
		button = *a.Button
	}
	if err := needXY(a.X, a.Y); err != nil {
		return tools.Result{}, err
	}
	err := d.click(ctx, *a.X, *a.Y, button, false, d.fit(ctx))
	return result(err, fmt.Sprintf("clicked button %d at %d,%d", button, *a.X, *a.Y))
}

func (d *Desktop) moveTool(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		X *int `json:"x"`
		Y *int `json:"y"`
	}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	if err := needXY(a.X, a.Y); err != nil {
		return tools.Result{}, err
	}
	err := d.move(ctx, *a.X, *a.Y, d.fit(ctx))
	return result(err, fmt.Sprintf("moved the pointer to %d,%d", *a.X, *a.Y))
}

func (d *Desktop) typeTool(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		Text string `json:"text"`
	}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	return result(d.Type(ctx, a.Text), fmt.Sprintf("typed %d characters", len([]rune(a.Text))))
}

// keysPattern is one or more keysym combinations ("ctrl+shift+t", "Return") separated by
// spaces: nothing xdotool could read as an option or a command.
var keysPattern = regexp.MustCompile(`^[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*( [A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*)*$`)

func (d *Desktop) keyTool(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		Keys string `json:"keys"`
	}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	return result(d.Key(ctx, a.Keys), "pressed "+strings.Join(strings.Fields(a.Keys), " "))
}

func (d *Desktop) scrollTool(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		DX int `json:"dx"`
		DY int `json:"dy"`
	}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	err := d.scroll(ctx, nil, nil, a.DX, a.DY, d.fit(ctx))
	return result(err, fmt.Sprintf("scrolled dx=%d dy=%d", a.DX, a.DY))
}
