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
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/agentvm/tools"
)

// These tests need no display: xdotool and the screen are fakes. Driving a real X server
// (Xvnc in the desktop image) is the box integration suite's job.

type fakeScreen struct {
	w, h int
	img  image.Image
}

func (s fakeScreen) Size(context.Context) (int, int, error) { return s.w, s.h, nil }
func (s fakeScreen) Capture(context.Context) (image.Image, error) {
	if s.img == nil {
		return nil, errors.New("no display")
	}
	return s.img, nil
}

func (fakeScreen) WindowManager(context.Context) (string, error) { return "", nil }

// startingScreen is a display whose window manager announces itself at the third look, as
// XFCE's does seconds after its session starts.
type startingScreen struct {
	fakeScreen
	looks atomic.Int32
}

func (s *startingScreen) WindowManager(context.Context) (string, error) {
	if s.looks.Add(1) < 3 {
		return "", nil
	}
	return "Xfwm4", nil
}

func TestWaitManagedWaitsForTheWindowManager(t *testing.T) {
	s := &startingScreen{}
	d := New(Config{Screen: s})
	wm, err := d.WaitManaged(t.Context())
	if err != nil || wm != "Xfwm4" {
		t.Fatalf("WaitManaged = %q, %v; want Xfwm4", wm, err)
	}
	if n := s.looks.Load(); n != 3 {
		t.Fatalf("looked %d times, want 3", n)
	}

	// No manager ever: the wait ends with its context and says what it waited for.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = New(Config{Screen: fakeScreen{}}).WaitManaged(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "wait for a window manager") {
		t.Fatalf("WaitManaged without a manager: %v", err)
	}
}

type recorder struct{ calls [][]string }

func (r *recorder) run(_ context.Context, args ...string) ([]byte, error) {
	r.calls = append(r.calls, args)
	return nil, nil
}

func newDesktop(w, h int) (map[string]tools.Tool, *recorder) {
	rec := &recorder{}
	d := New(Config{Run: rec.run, Screen: fakeScreen{w: w, h: h}})
	m := map[string]tools.Tool{}
	for _, t := range d.Tools() {
		m[t.Name()] = t
	}
	return m, rec
}

func TestValidation(t *testing.T) {
	ts, rec := newDesktop(1280, 800)
	cases := []struct{ tool, args, field string }{
		{"desktop_click", `{"y":1}`, "x"},
		{"desktop_click", `{"x":1}`, "y"},
		{"desktop_click", `{"x":-1,"y":1}`, "x"},
		{"desktop_click", `{"x":1280,"y":1}`, "x"},
		{"desktop_click", `{"x":1,"y":800}`, "y"},
		{"desktop_click", `{"x":1,"y":1,"button":4}`, "button"},
		{"desktop_click", `{"x":1,"y":1,"buton":1}`, "buton"},
		{"desktop_move", `{"x":"1","y":1}`, "x"},
		{"desktop_type", `{"text":""}`, "text"},
		{"desktop_type", `{"text":"` + strings.Repeat("a", maxTypeRunes+1) + `"}`, "text"},
		{"desktop_key", `{"keys":""}`, "keys"},
		{"desktop_key", `{"keys":"--window 1 a"}`, "keys"},
		{"desktop_key", `{"keys":"ctrl+l; rm"}`, "keys"},
		{"desktop_scroll", `{}`, "dy"},
		{"desktop_scroll", `{"dx":51}`, "dx"},
		{"desktop_scroll", `{"dy":-51}`, "dy"},
		{"desktop_screenshot", `{"x":1}`, "x"},
	}
	for _, c := range cases {
		_, err := ts[c.tool].Call(context.Background(), json.RawMessage(c.args))
		if !errors.Is(err, tools.ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s %.40s: err %v, want ErrInvalid naming %q", c.tool, c.args, err, c.field)
		}
	}
	if len(rec.calls) != 0 {
		t.Errorf("invalid calls ran xdotool: %q", rec.calls)
	}
	for _, tl := range ts {
		var schema map[string]any
		if err := json.Unmarshal(tl.Schema(), &schema); err != nil || schema["type"] != "object" {
			t.Errorf("%s: schema %s: %v", tl.Name(), tl.Schema(), err)
		}
	}
}

func TestInputCommands(t *testing.T) {
	cases := []struct {
		tool, args string
		want       []string
	}{
		{"desktop_click", `{"x":10,"y":20}`, []string{"mousemove", "10", "20", "click", "1"}},
		{"desktop_click", `{"x":10,"y":20,"button":3}`, []string{"mousemove", "10", "20", "click", "3"}},
		{"desktop_move", `{"x":1279,"y":799}`, []string{"mousemove", "1279", "799"}},
		{"desktop_type", `{"text":"-rf héllo"}`, []string{"type", "--delay", "12", "--", "-rf héllo"}},
		{"desktop_key", `{"keys":" ctrl+l  Return"}`, []string{"key", "ctrl+l", "Return"}},
		{"desktop_scroll", `{"dy":3}`, []string{"click", "--repeat", "3", "5"}},
		{"desktop_scroll", `{"dx":-2,"dy":-1}`, []string{"click", "--repeat", "1", "4", "click", "--repeat", "2", "6"}},
	}
	for _, c := range cases {
		ts, rec := newDesktop(1280, 800)
		res, err := ts[c.tool].Call(context.Background(), json.RawMessage(c.args))
		if err != nil || res.IsError {
			t.Errorf("%s %s: %+v, %v", c.tool, c.args, res, err)
			continue
		}
		if len(rec.calls) != 1 || !reflect.DeepEqual(rec.calls[0], c.want) {
			t.Errorf("%s %s: ran %q, want %q", c.tool, c.args, rec.calls, c.want)
		}
	}
}

func TestScaledCoordinates(t *testing.T) {
	// A 2560x1600 screen is shown to the model at 1280x800: its coordinates double, to the
	// middle of the two screen pixels each of its pixels covers.
	ts, rec := newDesktop(2560, 1600)
	if _, err := ts["desktop_click"].Call(context.Background(), json.RawMessage(`{"x":100,"y":799}`)); err != nil {
		t.Fatal(err)
	}
	if want := []string{"mousemove", "201", "1599", "click", "1"}; !reflect.DeepEqual(rec.calls[0], want) {
		t.Errorf("ran %q, want %q", rec.calls[0], want)
	}
	if _, err := ts["desktop_move"].Call(context.Background(), json.RawMessage(`{"x":1280,"y":0}`)); !errors.Is(err, tools.ErrInvalid) {
		t.Errorf("x beyond the screenshot: %v", err)
	}
}

func TestXdotoolFailure(t *testing.T) {
	d := New(Config{
		Run: func(context.Context, ...string) ([]byte, error) {
			return []byte("Can't open display"), errors.New("exit status 1")
		},
		Screen: fakeScreen{w: 100, h: 100},
	})
	res, err := d.Tools()[2].Call(context.Background(), json.RawMessage(`{"x":1,"y":1}`))
	if err != nil || !res.IsError || !strings.Contains(res.Text, "Can't open display") {
		t.Errorf("failing xdotool: %+v, %v", res, err)
	}
}

func TestScreenshot(t *testing.T) {
	src := image.NewRGBA(image.Rect(0, 0, 1920, 1080))
	src.Set(0, 0, color.RGBA{255, 0, 0, 255})
	d := New(Config{Run: (&recorder{}).run, Screen: fakeScreen{w: 1920, h: 1080, img: src}})
	res, err := d.Tools()[0].Call(context.Background(), nil)
	if err != nil || res.IsError || len(res.Images) != 1 {
		t.Fatalf("screenshot: %+v, %v", res, err)
	}
	img, err := png.Decode(bytes.NewReader(res.Images[0]))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 720 {
		t.Errorf("screenshot %v, want 1280x720", b)
	}
	d = New(Config{Screen: fakeScreen{}})
	if res, err := d.Tools()[0].Call(context.Background(), nil); err != nil || !res.IsError {
		t.Errorf("screenshot without a display: %+v, %v", res, err)
	}
}

func TestZPixmap(t *testing.T) {

	want := [][]px{{{255, 0, 0}, {0, 255, 0}, {0, 0, 255}}, {{1, 2, 3}, {255, 255, 255}, {0, 0, 0}}}
	w, h := 3, 2
	t.Run("depth24 bpp32 LSB", func(t *testing.T) {
		// What Xvnc -depth 24 serves on x86: BGRX in memory, scanlines already 32-bit aligned.
		var data []byte
		for _, row := range want {
			for _, p := range row {
				data = append(data, p.b, p.g, p.r, 0)
			}
		}
		img, err := zpixmapToImage(data, w, h, pixelFormat{BitsPerPixel: 32, ScanlinePad: 32, RedMask: 0xff0000, GreenMask: 0xff00, BlueMask: 0xff})
		check(t, img, err, want)
	})
	t.Run("bpp24 MSB padded", func(t *testing.T) {
		var data []byte
		for _, row := range want {
			for _, p := range row {
				data = append(data, p.r, p.g, p.b)
			}
			data = append(data, 0, 0, 0) // 9 bytes padded to 12
		}
		img, err := zpixmapToImage(data, w, h, pixelFormat{BitsPerPixel: 24, ScanlinePad: 32, MSBFirst: true, RedMask: 0xff0000, GreenMask: 0xff00, BlueMask: 0xff})
		check(t, img, err, want)
	})
	t.Run("rgb565", func(t *testing.T) {
		data := []byte{0x00, 0xf8, 0xe0, 0x07, 0x1f, 0x00, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0, 0}
		img, err := zpixmapToImage(data, w, h, pixelFormat{BitsPerPixel: 16, ScanlinePad: 32, RedMask: 0xf800, GreenMask: 0x07e0, BlueMask: 0x001f})
		if err != nil {
			t.Fatal(err)
		}
		if c := img.RGBAAt(0, 0); c != (color.RGBA{255, 0, 0, 255}) {
			t.Errorf("red %v", c)
		}
		if c := img.RGBAAt(1, 0); c != (color.RGBA{0, 255, 0, 255}) {
			t.Errorf("green %v", c)
		}
		if c := img.RGBAAt(2, 1); c != (color.RGBA{0, 0, 0, 255}) {
			t.Errorf("black %v", c)
		}
	})
	t.Run("short data", func(t *testing.T) {
		if _, err := zpixmapToImage(make([]byte, 10), w, h, pixelFormat{BitsPerPixel: 32, RedMask: 0xff0000, GreenMask: 0xff00, BlueMask: 0xff}); err == nil {
			t.Error("no error for truncated data")
		}
	})
	t.Run("palette", func(t *testing.T) {
		if _, err := zpixmapToImage(make([]byte, 64), w, h, pixelFormat{BitsPerPixel: 8}); err == nil {
			t.Error("no error for an 8-bit visual")
		}
	})
}

type px struct{ r, g, b uint8 }

func check(t *testing.T, img *image.RGBA, err error, want [][]px) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for y, row := range want {
		for x, p := range row {
			if c := img.RGBAAt(x, y); c != (color.RGBA{p.r, p.g, p.b, 255}) {
				t.Errorf("pixel %d,%d = %v, want %v", x, y, c, p)
			}
		}
	}
}

func TestNoDisplay(t *testing.T) {
	// A display nobody serves: an error result promptly, not a hang.
	d := New(Config{Display: ":4711", Run: (&recorder{}).run})
	res, err := d.Tools()[0].Call(context.Background(), nil)
	if err != nil || !res.IsError || !strings.Contains(res.Text, ":4711") {
		t.Errorf("screenshot of a missing display: %+v, %v", res, err)
	}
	res, err = d.Tools()[1].Call(context.Background(), json.RawMessage(`{"x":1,"y":1}`))
	if err != nil || !res.IsError {
		t.Errorf("click on a missing display: %+v, %v", res, err)
	}
}

func TestTypedActions(t *testing.T) {
	// The typed actions take screen pixels: a 2560x1600 screen is not scaled to the model's view.
	rec := &recorder{}
	src := image.NewRGBA(image.Rect(0, 0, 2560, 1600))
	d := New(Config{Run: rec.run, Screen: fakeScreen{w: 2560, h: 1600, img: src}})
	ctx := context.Background()
	if err := d.Click(ctx, 2000, 1500, ButtonRight, true); err != nil {
		t.Fatal(err)
	}
	if err := d.Move(ctx, 2559, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Scroll(ctx, 10, 20, 0, -2); err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"mousemove", "2000", "1500", "click", "--repeat", "2", "3"},
		{"mousemove", "2559", "0"},
		{"mousemove", "10", "20", "click", "--repeat", "2", "4"},
	}
	if !reflect.DeepEqual(rec.calls, want) {
		t.Errorf("ran %q, want %q", rec.calls, want)
	}
	for name, err := range map[string]error{
		"x":      d.Move(ctx, 2560, 0),
		"y":      d.Click(ctx, 0, -1, ButtonLeft, false),
		"button": d.Click(ctx, 0, 0, 4, false),
		"text":   d.Type(ctx, ""),
		"keys":   d.Key(ctx, " "),
		"dx":     d.Scroll(ctx, 0, 0, 99, 0),
	} {
		if !errors.Is(err, tools.ErrInvalid) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want ErrInvalid naming it", name, err)
		}
	}
	if _, err := ParseButton("back"); !errors.Is(err, tools.ErrInvalid) {
		t.Errorf("ParseButton(back): %v", err)
	}
	if b, err := ParseButton(""); err != nil || b != ButtonLeft {
		t.Errorf("ParseButton(\"\") = %d, %v", b, err)
	}

	shot, err := d.Screenshot(ctx, 0)
	if err != nil || shot.Width != 2560 || shot.Height != 1600 || shot.ScreenWidth != 2560 {
		t.Errorf("full-size screenshot: %dx%d of %dx%d, %v", shot.Width, shot.Height, shot.ScreenWidth, shot.ScreenHeight, err)
	}
	shot, err = d.Screenshot(ctx, 640)
	if err != nil || shot.Width != 640 || shot.Height != 400 || shot.ScreenHeight != 1600 {
		t.Errorf("screenshot at 640: %dx%d of %dx%d, %v", shot.Width, shot.Height, shot.ScreenWidth, shot.ScreenHeight, err)
	}
	if _, err := d.Screenshot(ctx, -1); !errors.Is(err, tools.ErrInvalid) || !strings.Contains(err.Error(), "max_width") {
		t.Errorf("screenshot at -1: %v", err)
	}

}
