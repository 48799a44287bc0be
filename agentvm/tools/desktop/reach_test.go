package desktop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"reflect"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/agentvm/tools"
)

// TestDrag: a drag holds the left button from one point to the other through a point between,
// in screen pixels scaled from the model's; an end off the screenshot is invalid, naming it.
func TestDrag(t *testing.T) {
	ts, rec := newDesktop(2560, 1600) // shown at 1280x800
	res, err := ts["desktop_drag"].Call(context.Background(), json.RawMessage(`{"x1":100,"y1":10,"x2":300,"y2":210}`))
	if err != nil || res.IsError {
		t.Fatalf("drag: %+v, %v", res, err)
	}
	want := []string{"mousemove", "201", "21", "mousedown", "1", "sleep", "0.1", "mousemove", "401", "221", "sleep", "0.1",
		"mousemove", "601", "421", "sleep", "0.1", "mouseup", "1"}
	if len(rec.calls) != 1 || !reflect.DeepEqual(rec.calls[0], want) {
		t.Fatalf("ran %q, want %q", rec.calls, want)
	}
	if _, err := ts["desktop_drag"].Call(context.Background(), json.RawMessage(`{"x1":1,"y1":1,"x2":1280,"y2":1}`)); !errors.Is(err, tools.ErrInvalid) || !strings.Contains(err.Error(), "end (x2, y2)") {
		t.Errorf("a drag off the screen: %v", err)
	}
}

// TestZoom: a region of the model's (scaled) screenshot comes back at the screen's full
// resolution, pixel for pixel, clipped to the screen.
func TestZoom(t *testing.T) {
	src := image.NewRGBA(image.Rect(0, 0, 2560, 1600))
	src.Set(200, 100, color.RGBA{255, 0, 0, 255}) // the region's first pixel
	src.Set(399, 299, color.RGBA{0, 0, 255, 255}) // its last
	d := New(Config{Run: (&recorder{}).run, Screen: fakeScreen{w: 2560, h: 1600, img: src}})
	var zoom tools.Tool
	for _, tl := range d.Tools() {
		if tl.Name() == "desktop_zoom" {
			zoom = tl
		}
	}
	res, err := zoom.Call(context.Background(), json.RawMessage(`{"x":100,"y":50,"width":100,"height":100}`))
	if err != nil || res.IsError || len(res.Images) != 1 {
		t.Fatalf("zoom: %+v, %v", res, err)
	}
	img, err := png.Decode(bytes.NewReader(res.Images[0]))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 200 || b.Dy() != 200 {
		t.Fatalf("zoomed %v; want 200x200 screen pixels for 100x100 of the screenshot", b)
	}
	if r, _, _, _ := img.At(0, 0).RGBA(); r>>8 != 255 {
		t.Errorf("the zoom's first pixel is not the screen's 200,100")
	}
	if _, _, b, _ := img.At(199, 199).RGBA(); b>>8 != 255 {
		t.Errorf("the zoom's last pixel is not the screen's 399,299")
	}
	if !strings.Contains(res.Text, "200x200 screen pixels from 200,100") {
		t.Errorf("zoom text %q", res.Text)
	}
	res, err = zoom.Call(context.Background(), json.RawMessage(`{"x":1200,"y":700,"width":500,"height":500}`))
	if err != nil || res.IsError || !strings.Contains(res.Text, "160x200 screen pixels from 2400,1400") {
		t.Errorf("a zoom past the edge: %+v, %v; want it clipped to the screen", res.Text, err)
	}
}

// TestWindows: the visible titled windows with their geometry, scaled to the screenshot's
// coordinates; a window that vanished while listed (xdotool's BadWindow, which fails the search
// but lists the others) is left out.
func TestWindows(t *testing.T) {
	answers := map[string]string{
		"search --onlyvisible --name .": "101\n102\nX Error of failed request:  BadWindow (invalid Window parameter)\n103\n",
		"getwindowname 101":             "Terminal - user@box\n",
		"getwindowgeometry --shell 101": "WINDOW=101\nX=200\nY=100\nWIDTH=1200\nHEIGHT=800\nSCREEN=0\n",
		"getwindowname 102":             "\n",
		"getwindowgeometry --shell 102": "WINDOW=102\nX=0\nY=0\nWIDTH=10\nHEIGHT=10\n",
	}
	d := New(Config{Screen: fakeScreen{w: 2560, h: 1600}, Run: func(_ context.Context, args ...string) ([]byte, error) {
		out, ok := answers[strings.Join(args, " ")]
		if args[0] == "search" {
			return []byte(out), errors.New("exit status 1") // a window went away while it looked
		}
		if !ok {
			return []byte("X Error of failed request: BadWindow"), errors.New("exit status 1")
		}
		return []byte(out), nil
	}})
	var list tools.Tool
	for _, tl := range d.Tools() {
		if tl.Name() == "desktop_windows" {
			list = tl
		}
	}
	res, err := list.Call(context.Background(), nil)
	if err != nil || res.IsError {
		t.Fatalf("windows: %+v, %v", res, err)
	}
	if want := `[{"title":"Terminal - user@box","x":100,"y":50,"width":600,"height":400}]`; res.Text != want {
		t.Fatalf("windows %s; want %s", res.Text, want)
	}
}
