package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/launcher/flags"

	"github.com/loomhand/cocoonbox/agentvm/tools"
)

const page = `<!doctype html><html><head><title>fixture</title></head><body>
<p id="msg">before</p>
<button id="go" onclick="document.getElementById('msg').textContent='after click'">go</button>
<input id="name">
</body></html>`

func toolsByName(b *Browser) map[string]tools.Tool {
	m := map[string]tools.Tool{}
	for _, t := range b.Tools() {
		m[t.Name()] = t
	}
	return m
}

func call(t *testing.T, tl tools.Tool, args string) tools.Result {
	t.Helper()
	res, err := tl.Call(context.Background(), json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s %s: %v", tl.Name(), args, err)
	}
	return res
}

func TestValidation(t *testing.T) {
	// Validation never reaches a browser: Bin points nowhere on purpose.
	ts := toolsByName(New(Config{Bin: "/nonexistent/chromium"}))
	cases := []struct{ tool, args, field string }{
		{"browser_open", `{}`, "url"},
		{"browser_open", `{"url":"javascript:alert(1)"}`, "url"},
		{"browser_open", `{"url":"ftp://example.com/"}`, "url"},
		{"browser_open", `{"url":"http:///nohost"}`, "url"},
		{"browser_open", `{"uri":"http://x"}`, "uri"},
		{"browser_click", `{"selector":"  "}`, "selector"},
		{"browser_type", `{"selector":"#a"}`, "text"},
		{"browser_type", `{"text":"x"}`, "selector"},
		{"browser_read", `{"selector":""}`, "selector"},
		{"browser_screenshot", `{"full":true}`, "full"},
	}
	for _, c := range cases {
		_, err := ts[c.tool].Call(context.Background(), json.RawMessage(c.args))
		if !errors.Is(err, tools.ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s %s: err %v, want ErrInvalid naming %q", c.tool, c.args, err, c.field)
		}
	}
	for _, tl := range ts {
		var schema map[string]any
		if err := json.Unmarshal(tl.Schema(), &schema); err != nil || schema["type"] != "object" {
			t.Errorf("%s: schema %s is not a JSON object schema: %v", tl.Name(), tl.Schema(), err)
		}
	}
}

func TestDownscale(t *testing.T) {
	src := image.NewRGBA(image.Rect(0, 0, 2560, 100))
	for x := range 2560 {
		for y := range 100 {
			src.Set(x, y, color.RGBA{uint8(x % 2 * 255), 0, 0, 255})
		}
	}
	got := tools.Downscale(src, 1280)
	if b := got.Bounds(); b.Dx() != 1280 || b.Dy() != 50 {
		t.Fatalf("size %v, want 1280x50", b)
	}
	if r, _, _, _ := got.At(10, 10).RGBA(); r>>8 < 120 || r>>8 > 135 {
		t.Errorf("averaged red %d, want about 127", r>>8)
	}
	small := image.NewRGBA(image.Rect(0, 0, 640, 480))
	if tools.Downscale(small, 1280) != image.Image(small) {
		t.Error("an image narrower than the limit was copied")
	}
}

// TestBeforeLaunch: a launch with a window waits for the display first (in a box, for the
// window manager), every time it launches; a headless launch and an attach do not wait.
func TestBeforeLaunch(t *testing.T) {
	var waits int
	cfg := Config{Bin: "/nonexistent/chromium", BeforeLaunch: func(context.Context) { waits++ }}
	open := func(b *Browser) error {
		_, err := toolsByName(b)["browser_open"].Call(t.Context(), json.RawMessage(`{"url":"http://127.0.0.1:1/"}`))
		return err
	}
	windowed := New(cfg)
	for range 2 { // the launch fails (no such binary), so the next call launches, and waits, again
		if err := open(windowed); err == nil || !strings.Contains(err.Error(), "launch chromium") {
			t.Fatalf("open with a missing chromium: %v", err)
		}
	}
	if waits != 2 {
		t.Fatalf("BeforeLaunch called %d times for 2 windowed launches", waits)
	}
	headless := cfg
	headless.Headless = true
	attached := cfg
	attached.ControlURL = "ws://127.0.0.1:1/devtools/browser/none"
	for _, c := range []Config{headless, attached} {
		if err := open(New(c)); err == nil {
			t.Fatal("open reached a browser that does not exist")
		}
	}
	if waits != 2 {
		t.Fatalf("BeforeLaunch called for a headless launch or an attach (%d calls)", waits)
	}
}

// TestHeadless drives Debian's chromium headless against a local page. Real display (non-
// headless on :0) runs belong to the box integration suite.
func TestHeadless(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not in PATH")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(page))
	}))
	defer srv.Close()

	b := New(Config{Bin: bin, Headless: true, ElementTimeout: time.Second, CallTimeout: 60 * time.Second})
	defer func() {
		if err := b.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	ts := toolsByName(b)

	if res := call(t, ts["browser_open"], `{"url":"`+srv.URL+`"}`); res.IsError || !strings.Contains(res.Text, "fixture") {
		t.Fatalf("open: %+v", res)
	}
	if res := call(t, ts["browser_read"], `{"selector":"#msg"}`); res.Text != "before" {
		t.Fatalf("read before click: %+v", res)
	}
	if res := call(t, ts["browser_click"], `{"selector":"#go"}`); res.IsError {
		t.Fatalf("click: %+v", res)
	}
	if res := call(t, ts["browser_read"], `{}`); res.IsError || !strings.Contains(res.Text, "after click") {
		t.Fatalf("read after click: %+v", res)
	}
	if res := call(t, ts["browser_type"], `{"selector":"#name","text":"hello"}`); res.IsError {
		t.Fatalf("type: %+v", res)
	}

	res := call(t, ts["browser_screenshot"], `{}`)
	if res.IsError || len(res.Images) != 1 {
		t.Fatalf("screenshot: %+v", res)
	}
	img, err := png.Decode(bytes.NewReader(res.Images[0]))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if w := img.Bounds().Dx(); w == 0 || w > DefaultMaxWidth {
		t.Errorf("screenshot width %d", w)
	}

	start := time.Now()
	res = call(t, ts["browser_click"], `{"selector":"#missing"}`)
	if !res.IsError || !strings.Contains(res.Text, "#missing") {
		t.Errorf("missing element: %+v", res)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("missing element took %s; the wait is not bounded", d)
	}
	if res := call(t, ts["browser_read"], `{"selector":"p[[["}`); !res.IsError {
		t.Errorf("malformed selector: %+v", res)
	}
	if res := call(t, ts["browser_open"], `{"url":"http://127.0.0.1:1/"}`); !res.IsError {
		t.Errorf("unreachable url: %+v", res)
	}
}

// TestAttach attaches to a chromium started elsewhere, as the agent does to the box's, and
// leaves it running on Close.
func TestAttach(t *testing.T) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not in PATH")
	}
	l := launcher.New().Bin(bin).Leakless(false).Set(flags.NoSandbox).Headless(true)
	u, err := l.Launch()
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	defer func() {
		l.Kill()
		l.Cleanup()
	}()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(page))
	}))
	defer srv.Close()

	for range 2 { // the second round proves the first Close left the browser up
		b := New(Config{ControlURL: u, ElementTimeout: time.Second})
		ts := toolsByName(b)
		if res := call(t, ts["browser_open"], `{"url":"`+srv.URL+`"}`); res.IsError {
			t.Fatalf("open: %+v", res)
		}
		if res := call(t, ts["browser_read"], `{"selector":"#msg"}`); res.Text != "before" {
			t.Fatalf("read: %+v", res)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
	}
}
