// Package desktop gives the agent the box's X display as tools: screenshots read over the X
// protocol, pointer and keyboard driven with xdotool (in the desktop image), so whatever a person
// watching over VNC sees is what the agent sees and acts on.
package desktop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"os"
	"os/exec"
	"regexp"
	"strconv"
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
)

// RefusedText is the result of an input action while a person holds control of the desktop.
const RefusedText = "a person is in control of the desktop; wait for hand-back"

// Runner runs xdotool with args and returns its combined output.
type Runner func(ctx context.Context, args ...string) ([]byte, error)

// Screen is the display the tools look at.
type Screen interface {
	// Size is the screen's size in pixels.
	Size(ctx context.Context) (width, height int, err error)
	// Capture grabs the whole screen.
	Capture(ctx context.Context) (image.Image, error)
}

// Config says which display to drive and who may drive it.
type Config struct {
	// Display is the X display, ":0" if empty.
	Display string
	// Allowed is asked before every input action (not screenshots); an error means a person
	// holds control and the action is refused. Nil allows everything.
	Allowed func() error
	// Run runs xdotool; nil execs it with DISPLAY set. Tests inject a fake.
	Run Runner
	// Screen captures the display; nil reads Display over the X protocol.
	Screen Screen
	// MaxWidth is the widest screenshot handed to the model; wider screens are downscaled and
	// the model's coordinates, given in screenshot pixels, are scaled back.
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
	return []tools.Tool{
		&tool{"desktop_screenshot", "Take a PNG screenshot of the whole desktop. Coordinates the other desktop tools take are pixels of this screenshot.",
			`{"type":"object","properties":{},"additionalProperties":false}`, d.screenshot},
		&tool{"desktop_click", "Move the pointer to (x, y) on the desktop and click a mouse button (1 left, 2 middle, 3 right; default 1).",
			`{"type":"object","properties":{` + xy + `,"button":{"type":"integer","minimum":1,"maximum":3}},"required":["x","y"],"additionalProperties":false}`, d.click},
		&tool{"desktop_move", "Move the pointer to (x, y) on the desktop without clicking.",
			`{"type":"object","properties":{` + xy + `},"required":["x","y"],"additionalProperties":false}`, d.move},
		&tool{"desktop_type", "Type text on the desktop's keyboard into the focused window.",
			`{"type":"object","properties":{"text":{"type":"string","maxLength":2000}},"required":["text"],"additionalProperties":false}`, d.typeText},
		&tool{"desktop_key", `Press a key or key combination, X keysym names joined by "+", several separated by spaces: "Return", "ctrl+l", "alt+Tab", "ctrl+a BackSpace".`,
			`{"type":"object","properties":{"keys":{"type":"string"}},"required":["keys"],"additionalProperties":false}`, d.key},
		&tool{"desktop_scroll", "Scroll the window under the pointer: dy steps down (negative up), dx steps right (negative left).",
			`{"type":"object","properties":{"dx":{"type":"integer","minimum":-50,"maximum":50},"dy":{"type":"integer","minimum":-50,"maximum":50}},"additionalProperties":false}`, d.scroll},
	}
}

type tool struct {
	name, desc, schema string
	call               func(context.Context, json.RawMessage) (tools.Result, error)
}

func (t *tool) Name() string            { return t.name }
func (t *tool) Description() string     { return t.desc }
func (t *tool) Schema() json.RawMessage { return json.RawMessage(t.schema) }
func (t *tool) Call(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	return t.call(ctx, args)
}

func decode(args json.RawMessage, v any) error {
	if t := bytes.TrimSpace(args); len(t) == 0 || string(t) == "null" {
		args = json.RawMessage(`{}`)
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", tools.ErrInvalid, err)
	}
	return nil
}

func invalid(field, why string) error {
	return fmt.Errorf("%w: %s: %s", tools.ErrInvalid, field, why)
}

func failed(format string, a ...any) tools.Result {
	return tools.Result{Text: fmt.Sprintf(format, a...), IsError: true}
}

// input runs one input action: refused while a person holds control, else xdotool with args.
func (d *Desktop) input(ctx context.Context, timeout time.Duration, done string, args ...string) (tools.Result, error) {
	if d.cfg.Allowed != nil {
		if err := d.cfg.Allowed(); err != nil {
			return tools.Result{Text: RefusedText, IsError: true}, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := d.cfg.Run(ctx, args...)
	if err != nil {
		return failed("xdotool %s: %v: %s", args[0], err, strings.TrimSpace(string(out))), nil
	}
	return tools.Result{Text: done}, nil
}

// point validates (x, y), given in screenshot pixels, and maps it to screen pixels.
func (d *Desktop) point(ctx context.Context, x, y *int) (int, int, *tools.Result, error) {
	if x == nil {
		return 0, 0, nil, invalid("x", "is required")
	}
	if y == nil {
		return 0, 0, nil, invalid("y", "is required")
	}
	if *x < 0 {
		return 0, 0, nil, invalid("x", "must not be negative")
	}
	if *y < 0 {
		return 0, 0, nil, invalid("y", "must not be negative")
	}
	sctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	w, h, err := d.cfg.Screen.Size(sctx)
	if err != nil {
		r := failed("desktop: %v", err)
		return 0, 0, &r, nil
	}
	sw, sh := scaled(w, h, d.cfg.MaxWidth)
	if *x >= sw {
		return 0, 0, nil, invalid("x", fmt.Sprintf("%d is off the screen (width %d)", *x, sw))
	}
	if *y >= sh {
		return 0, 0, nil, invalid("y", fmt.Sprintf("%d is off the screen (height %d)", *y, sh))
	}
	return *x * w / sw, *y * h / sh, nil, nil
}

// scaled is the size of a w×h screen's screenshot.
func scaled(w, h, maxWidth int) (int, int) {
	if w > maxWidth {
		return maxWidth, max(h*maxWidth/w, 1)
	}
	return w, h
}

func (d *Desktop) screenshot(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct{}
	if err := decode(args, &a); err != nil {
		return tools.Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	img, err := d.cfg.Screen.Capture(ctx)
	if err != nil {
		return failed("desktop screenshot: %v", err), nil
	}
	small := tools.Downscale(img, d.cfg.MaxWidth)
	out, err := tools.EncodePNG(small)
	if err != nil {
		return failed("desktop screenshot: encode: %v", err), nil
	}
	b := small.Bounds()
	return tools.Result{Text: fmt.Sprintf("desktop %dx%d", b.Dx(), b.Dy()), Images: [][]byte{out}}, nil
}

type xyArgs struct {
	X      *int `json:"x"`
	Y      *int `json:"y"`
	Button *int `json:"button"`
}

func (d *Desktop) click(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a xyArgs
	if err := decode(args, &a); err != nil {
		return tools.Result{}, err
	}
	button := 1
	if a.Button != nil {
		if *a.Button < 1 || *a.Button > 3 {
			return tools.Result{}, invalid("button", "must be 1 (left), 2 (middle) or 3 (right)")
		}
		button = *a.Button
	}
	x, y, r, err := d.point(ctx, a.X, a.Y)
	if r != nil || err != nil {
		return deref(r), err
	}
	return d.input(ctx, d.cfg.Timeout, fmt.Sprintf("clicked button %d at %d,%d", button, *a.X, *a.Y),
		"mousemove", strconv.Itoa(x), strconv.Itoa(y), "click", strconv.Itoa(button))
}

func (d *Desktop) move(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		X *int `json:"x"`
		Y *int `json:"y"`
	}
	if err := decode(args, &a); err != nil {
		return tools.Result{}, err
	}
	x, y, r, err := d.point(ctx, a.X, a.Y)
	if r != nil || err != nil {
		return deref(r), err
	}
	return d.input(ctx, d.cfg.Timeout, fmt.Sprintf("moved the pointer to %d,%d", *a.X, *a.Y),
		"mousemove", strconv.Itoa(x), strconv.Itoa(y))
}

func deref(r *tools.Result) tools.Result {
	if r == nil {
		return tools.Result{}
	}
	return *r
}

func (d *Desktop) typeText(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		Text string `json:"text"`
	}
	if err := decode(args, &a); err != nil {
		return tools.Result{}, err
	}
	n := len([]rune(a.Text))
	if n == 0 {
		return tools.Result{}, invalid("text", "must not be empty")
	}
	if n > maxTypeRunes {
		return tools.Result{}, invalid("text", fmt.Sprintf("%d characters; at most %d a call", n, maxTypeRunes))
	}
	timeout := d.cfg.Timeout + time.Duration(n)*typeDelay
	return d.input(ctx, timeout, fmt.Sprintf("typed %d characters", n),
		"type", "--delay", strconv.Itoa(int(typeDelay/time.Millisecond)), "--", a.Text)
}

// keysPattern is one or more keysym combinations ("ctrl+shift+t", "Return") separated by
// spaces: nothing xdotool could read as an option or a command.
var keysPattern = regexp.MustCompile(`^[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*( [A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*)*$`)

func (d *Desktop) key(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		Keys string `json:"keys"`
	}
	if err := decode(args, &a); err != nil {
		return tools.Result{}, err
	}
	keys := strings.Join(strings.Fields(a.Keys), " ")
	if keys == "" {
		return tools.Result{}, invalid("keys", "must not be empty")
	}
	if !keysPattern.MatchString(keys) || len(keys) > 200 {
		return tools.Result{}, invalid("keys", fmt.Sprintf("%q is not keysym names joined by + and separated by spaces", a.Keys))
	}
	return d.input(ctx, d.cfg.Timeout, "pressed "+keys, append([]string{"key"}, strings.Fields(keys)...)...)
}

func (d *Desktop) scroll(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		DX int `json:"dx"`
		DY int `json:"dy"`
	}
	if err := decode(args, &a); err != nil {
		return tools.Result{}, err
	}
	if a.DX < -maxScrollSteps || a.DX > maxScrollSteps {
		return tools.Result{}, invalid("dx", fmt.Sprintf("must be between %d and %d", -maxScrollSteps, maxScrollSteps))
	}
	if a.DY < -maxScrollSteps || a.DY > maxScrollSteps {
		return tools.Result{}, invalid("dy", fmt.Sprintf("must be between %d and %d", -maxScrollSteps, maxScrollSteps))
	}
	if a.DX == 0 && a.DY == 0 {
		return tools.Result{}, invalid("dy", "dx and dy are both zero")
	}
	// X has no scroll events: wheel steps are clicks of buttons 4 (up), 5 (down), 6 (left), 7 (right).
	var cmd []string
	if a.DY != 0 {
		cmd = append(cmd, "click", "--repeat", strconv.Itoa(abs(a.DY)), wheel(a.DY, "4", "5"))
	}
	if a.DX != 0 {
		cmd = append(cmd, "click", "--repeat", strconv.Itoa(abs(a.DX)), wheel(a.DX, "6", "7"))
	}
	return d.input(ctx, d.cfg.Timeout, fmt.Sprintf("scrolled dx=%d dy=%d", a.DX, a.DY), cmd...)
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
