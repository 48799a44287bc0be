package desktop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/draw"
	"regexp"
	"strconv"
	"strings"

	"github.com/loomhand/cocoonbox/agentvm/tools"
)

// The tools beyond pointing and typing: dragging, a closer look at part of the screen, and the
// list of windows. Coordinates are the model's, in the pixels of its (scaled) screenshots.

// maxWindows bounds the windows desktop_windows lists.
const maxWindows = 50

// windowID is a line of xdotool search's output that names a window.
var windowID = regexp.MustCompile(`(?m)^[0-9]+$`)

// reachTools are desktop_drag, desktop_zoom, desktop_windows and desktop_accessibility.
func (d *Desktop) reachTools() []tools.Tool {
	return []tools.Tool{
		tools.Func("desktop_drag", "Press the left mouse button at (x1, y1), move to (x2, y2) with the button held, and release it: drag a window by its title bar, a slider, a selection, a file onto a folder.",
			`{"type":"object","properties":{"x1":{"type":"integer","minimum":0},"y1":{"type":"integer","minimum":0},"x2":{"type":"integer","minimum":0},"y2":{"type":"integer","minimum":0}},"required":["x1","y1","x2","y2"],"additionalProperties":false}`, d.dragTool),
		tools.Func("desktop_zoom", "Take a screenshot of one region of the desktop at the screen's full resolution, to read small text or see details the scaled screenshot blurs. The region is in the screenshot's coordinates.",
			`{"type":"object","properties":{"x":{"type":"integer","minimum":0},"y":{"type":"integer","minimum":0},"width":{"type":"integer","minimum":1},"height":{"type":"integer","minimum":1}},"required":["x","y","width","height"],"additionalProperties":false}`, d.zoomTool),
		tools.Func("desktop_windows", "List the desktop's visible windows: each one's title and geometry (x, y, width, height) in the screenshot's coordinates.",
			`{"type":"object","properties":{},"additionalProperties":false}`, d.windowsTool),
		tools.Func("desktop_accessibility", "List the accessibility tree of the focused window (or of the window whose title holds window): each element's role, name, box (x,y width x height, in the screenshot's coordinates) and states, such as push button \"Save\" 600,400 80x30 [focused]. Click the middle of an element's box to press it.",
			`{"type":"object","properties":{"window":{"type":"string","maxLength":200,"description":"part of a window's title; the focused window when left out"}},"additionalProperties":false}`, d.accessibilityTool),
	}
}

func (d *Desktop) dragTool(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		X1, Y1, X2, Y2 *int
	}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"x1", a.X1}, {"y1", a.Y1}, {"x2", a.X2}, {"y2", a.Y2}} {
		if f.v == nil {
			return tools.Result{}, tools.Invalid(f.name, "is required")
		}
	}
	err := d.Drag(ctx, *a.X1, *a.Y1, *a.X2, *a.Y2, d.fit(ctx))
	return result(err, fmt.Sprintf("dragged from %d,%d to %d,%d", *a.X1, *a.Y1, *a.X2, *a.Y2))
}

// Drag presses the left button at (x1, y1), moves to (x2, y2) through a point between and
// releases it; the points are in a screenshot scaled to fit (the zero Fit: screen pixels). Window
// managers take a move only from motion with the button held, hence the pauses.
func (d *Desktop) Drag(ctx context.Context, x1, y1, x2, y2 int, fit tools.Fit) error {
	sx1, sy1, err := d.locate(ctx, x1, y1, fit)
	if err != nil {
		return fmt.Errorf("the drag's start (x1, y1): %w", err)
	}
	sx2, sy2, err := d.locate(ctx, x2, y2, fit)
	if err != nil {
		return fmt.Errorf("the drag's end (x2, y2): %w", err)
	}
	mx, my := (sx1+sx2)/2, (sy1+sy2)/2
	return d.input(ctx, d.cfg.Timeout,
		"mousemove", strconv.Itoa(sx1), strconv.Itoa(sy1), "mousedown", "1", "sleep", "0.1",
		"mousemove", strconv.Itoa(mx), strconv.Itoa(my), "sleep", "0.1",
		"mousemove", strconv.Itoa(sx2), strconv.Itoa(sy2), "sleep", "0.1", "mouseup", "1")
}

func (d *Desktop) zoomTool(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct {
		X, Y, Width, Height *int
	}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	if a.X == nil || a.Y == nil || a.Width == nil || a.Height == nil {
		return tools.Result{}, tools.Invalid("x", "x, y, width and height are required")
	}
	png, r, err := d.Zoom(ctx, image.Rect(*a.X, *a.Y, *a.X+*a.Width, *a.Y+*a.Height), d.fit(ctx))
	if err != nil {
		return result(err, "")
	}
	return tools.Result{Text: fmt.Sprintf("region %d,%d %dx%d of the screenshot, at full resolution: %dx%d screen pixels from %d,%d",
		*a.X, *a.Y, *a.Width, *a.Height, r.Dx(), r.Dy(), r.Min.X, r.Min.Y), Images: [][]byte{png}}, nil
}

// Zoom captures region (in a screenshot scaled to fit, or screen pixels with the zero Fit) at
// the screen's full resolution, and says which screen pixels it holds.
func (d *Desktop) Zoom(ctx context.Context, region image.Rectangle, fit tools.Fit) ([]byte, image.Rectangle, error) {
	if region.Dx() <= 0 || region.Dy() <= 0 {
		return nil, image.Rectangle{}, tools.Invalid("width", "width and height must be at least 1")
	}
	if _, _, err := d.locate(ctx, region.Min.X, region.Min.Y, fit); err != nil {
		return nil, image.Rectangle{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	img, err := d.cfg.Screen.Capture(cctx)
	if err != nil {
		return nil, image.Rectangle{}, fmt.Errorf("desktop zoom: %w", err)
	}
	b := img.Bounds()
	vw, vh := fit.Size(b.Dx(), b.Dy())
	// From the near edge of the region's first scaled pixel to the near edge of the one past
	// it, clipped to the screen.
	x0, y0 := region.Min.X*b.Dx()/vw, region.Min.Y*b.Dy()/vh
	x1, y1 := min(region.Max.X*b.Dx()/vw, b.Dx()), min(region.Max.Y*b.Dy()/vh, b.Dy())
	r := image.Rect(x0, y0, max(x1, x0+1), max(y1, y0+1)).Intersect(b)
	crop := image.NewRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
	draw.Draw(crop, crop.Bounds(), img, r.Min, draw.Src)
	out, err := tools.EncodePNG(crop)
	if err != nil {
		return nil, image.Rectangle{}, fmt.Errorf("desktop zoom: encode: %w", err)
	}
	return out, r, nil
}

// Window is a visible window, in screen pixels.
type Window struct {
	ID                  string
	Title               string
	X, Y, Width, Height int
}

func (d *Desktop) windowsTool(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	var a struct{}
	if err := tools.DecodeArgs(args, &a); err != nil {
		return tools.Result{}, err
	}
	ws, err := d.Windows(ctx)
	if err != nil {
		return result(err, "")
	}
	w, h, vw, vh, err := d.view(ctx)
	if err != nil {
		return result(err, "")
	}
	type view struct {
		Title  string `json:"title"`
		X      int    `json:"x"`
		Y      int    `json:"y"`
		Width  int    `json:"width"`
		Height int    `json:"height"`
	}
	out := []view{}
	for _, win := range ws {
		// Screen pixels to the screenshot's: the scale of locate, inverted.
		out = append(out, view{Title: win.Title,
			X: tools.FromScreen(win.X, vw, w), Y: tools.FromScreen(win.Y, vh, h),
			Width: tools.FromScreen(win.Width, vw, w), Height: tools.FromScreen(win.Height, vh, h)})
	}
	text, _ := json.Marshal(out)
	return tools.Result{Text: string(text)}, nil
}

// Windows lists the visible windows that have a title, at most maxWindows, in screen pixels.
func (d *Desktop) Windows(ctx context.Context) ([]Window, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	// xdotool search exits 1 when it finds nothing, and fails with BadWindow when a window
	// goes away while it looks (its output still lists the others): a failure is one without a
	// window ID, tried once more.
	var ids []byte
	for try := 0; try < 2; try++ {
		var err error
		ids, err = d.cfg.Run(ctx, "search", "--onlyvisible", "--name", ".")
		if err == nil || windowID.Match(ids) || len(strings.TrimSpace(string(ids))) == 0 {
			break
		}
		if try == 1 {
			return nil, fmt.Errorf("xdotool search: %w: %s", err, strings.TrimSpace(string(ids)))
		}
	}
	var out []Window
	sc := bufio.NewScanner(strings.NewReader(string(ids)))
	for sc.Scan() && len(out) < maxWindows {
		id := strings.TrimSpace(sc.Text())
		if _, err := strconv.ParseUint(id, 10, 64); err != nil {
			continue
		}
		name, err := d.cfg.Run(ctx, "getwindowname", id)
		if err != nil {
			continue // the window went away meanwhile
		}
		geo, err := d.cfg.Run(ctx, "getwindowgeometry", "--shell", id)
		if err != nil {
			continue
		}
		w := Window{ID: id, Title: strings.TrimSpace(string(name))}
		for _, line := range strings.Split(string(geo), "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
			n, _ := strconv.Atoi(v)
			switch k {
			case "X":
				w.X = n
			case "Y":
				w.Y = n
			case "WIDTH":
				w.Width = n
			case "HEIGHT":
				w.Height = n
			}
		}
		if w.Title != "" {
			out = append(out, w)
		}
	}
	return out, nil
}
