package devstack_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"image/png"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// TestMCPDesktop is what a local coding agent does with a box's desktop over MCP: it takes a
// screenshot (a 1280-wide PNG), clicks into a window (the box's pointer goes there), types and
// presses a chord (the window gets the key presses); while another person holds
// the desktop's control lease its click is refused naming them, and after they hand back it
// works again; a screenshot of a hibernated box wakes it.
func TestMCPDesktop(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.Template = "desktop"
	e := newDesktopEnv(t, cfg, 6*time.Minute)
	ctx := e.ctx
	c, err := mcpConnect(ctx, t, e.d.URLs().API+"/mcp", e.token)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}

	// The agent starts with the box; until it answers the tool says unavailable.
	var shot *mcp.CallToolResult
	if err := testutil.Poll(ctx, time.Minute, func() error {
		shot = mcpCallRaw(ctx, t, c, "box_screenshot", map[string]any{"box": "desk"})
		if shot.IsError {
			return errors.New(mcpText(shot))
		}
		return nil
	}); err != nil {
		t.Fatalf("box_screenshot: %v", err)
	}
	checkScreenshot(t, shot, 1280)

	// An xev window, which logs the key events it gets.
	e.mustRun(t, `setsid -f runuser -u user -- env DISPLAY=:0 stdbuf -oL xev -name typing -geometry 400x300+200+150 `+
		`-event keyboard </dev/null >/home/user/xev.log 2>&1`)
	var geo string
	if err := testutil.Poll(ctx, 30*time.Second, func() error {
		var err error
		geo, err = e.run("runuser -u user -- env DISPLAY=:0 xdotool search --name '^typing$' getwindowgeometry --shell")
		return err
	}); err != nil {
		t.Fatalf("the xev window: %v", err)
	}
	var win struct{ x, y, w, h int }
	for _, f := range strings.Fields(geo) {
		k, v, _ := strings.Cut(f, "=")
		for name, dst := range map[string]*int{"X": &win.x, "Y": &win.y, "WIDTH": &win.w, "HEIGHT": &win.h} {
			if k == name {
				_, _ = fmt.Sscan(v, dst)
			}
		}
	}
	if win.w == 0 || win.h == 0 {
		t.Fatalf("xev window geometry %q", geo)
	}
	at := point{win.x + win.w/2, win.y + win.h/2}

	click := map[string]any{"box": "desk", "x": at.x, "y": at.y}
	var clicked map[string]any
	mcpCall(ctx, t, c, "box_click", click, &clicked)
	if got := e.pointer(t); got != at {
		t.Fatalf("pointer after box_click at %v: %v", at, got)
	}
	// The click gives the window the focus once the window manager has managed it, which a busy
	// machine may not have done yet when xdotool first finds the window: click until it has it.
	if err := testutil.Poll(ctx, 20*time.Second, func() error {
		name, err := e.run("runuser -u user -- env DISPLAY=:0 xdotool getactivewindow getwindowname")
		if err == nil && strings.TrimSpace(name) != "typing" {
			mcpCall(ctx, t, c, "box_click", click, &clicked)
			err = fmt.Errorf("the active window is %q", strings.TrimSpace(name))
		}
		return err
	}); err != nil {
		t.Fatalf("box_click does not focus the xev window: %v", err)
	}
	var out map[string]any
	mcpCall(ctx, t, c, "box_type", map[string]any{"box": "desk", "text": "hi cocoon"}, &out)
	mcpCall(ctx, t, c, "box_key", map[string]any{"box": "desk", "keys": "ctrl+Return"}, &out)
	want := []string{"h", "i", "space", "c", "o", "c", "o", "o", "n", "Control_L", "Return"}
	if err := testutil.Poll(ctx, 20*time.Second, func() error {
		log, err := e.run("cat /home/user/xev.log")
		if got := keyPresses(log); err == nil && !slices.Equal(got, want) {
			err = fmt.Errorf("key presses %v", got)
		}
		return err
	}); err != nil {
		t.Fatalf("box_type and box_key into the xev window: %v; want %v", err, want)
	}

	// A point off the screen is refused by the box's agent, naming the field.
	if res := mcpCallRaw(ctx, t, c, "box_click", map[string]any{"box": "desk", "x": 5000, "y": 10}); !res.IsError ||
		!strings.HasPrefix(mcpText(res), "invalid: x:") {
		t.Errorf("box_click off the screen: %q (isError %v); want invalid naming x", mcpText(res), res.IsError)
	}

	// Another person takes the desktop over: the owner's input is refused, naming them.
	pilot, err := e.d.Store.CreateUser(ctx, store.NewUser{Name: "pilot"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Boxes.Share(ctx, e.owner.ID, e.id, pilot.Name, cocoonbox.RoleDriver, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Boxes.TakeOver(ctx, pilot.ID, e.id); err != nil {
		t.Fatal(err)
	}
	click["x"], click["y"] = 5, 5
	res := mcpCallRaw(ctx, t, c, "box_click", click)
	if text := mcpText(res); !res.IsError || !strings.HasPrefix(text, "conflict") || !strings.Contains(text, "pilot") {
		t.Fatalf("box_click while pilot holds the lease: %q (isError %v); want a conflict naming pilot", text, res.IsError)
	}
	if got := e.pointer(t); got != at {
		t.Fatalf("pointer moved to %v by a refused click", got)
	}
	// Watching is not input: a screenshot is still fine.
	if res := mcpCallRaw(ctx, t, c, "box_screenshot", map[string]any{"box": "desk", "max_width": 640}); res.IsError {
		t.Fatalf("box_screenshot while pilot holds the lease: %q", mcpText(res))
	} else {
		checkScreenshot(t, res, 640)
	}
	if _, err := e.d.Boxes.HandBack(ctx, pilot.ID, e.id); err != nil {
		t.Fatal(err)
	}
	mcpCall(ctx, t, c, "box_click", click, &clicked)
	if got := e.pointer(t); got != (point{5, 5}) {
		t.Fatalf("pointer after box_click at (5, 5) once handed back: %v", got)
	}

	// Input is audited, screenshots are not; typed text is counted, never recorded.
	events, err := e.d.Store.EventsForBox(ctx, string(e.id), 100)
	if err != nil {
		t.Fatal(err)
	}
	audited := map[string]int{}
	for _, ev := range events {
		audited[ev.Action]++
		if strings.Contains(string(ev.Detail), "cocoon") {
			t.Errorf("audit event %s records the typed text: %s", ev.Action, ev.Detail)
		}
	}
	if audited["box.desktop.click"] != 2 || audited["box.desktop.type"] != 1 || audited["box.desktop.key"] != 1 {
		t.Errorf("audit events %v; want 2 clicks, a type and a key", audited)
	}
	for action := range audited {
		if strings.Contains(action, "screenshot") {
			t.Errorf("audit event %s for a screenshot", action)
		}
	}

	// A screenshot of a hibernated box wakes it through its workflow.
	if v, err := e.d.Boxes.Hibernate(ctx, e.owner.ID, e.id); err != nil || v.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("hibernate: %+v, %v", v.State, err)
	}
	res = mcpCallRaw(ctx, t, c, "box_screenshot", map[string]any{"box": "desk"})
	if res.IsError {
		t.Fatalf("box_screenshot of the hibernated box: %q", mcpText(res))
	}
	checkScreenshot(t, res, 1280)
	if v, err := e.d.Boxes.Get(ctx, e.owner.ID, e.id); err != nil || v.State != cocoonbox.BoxStateRunning {
		t.Fatalf("box after the screenshot: %+v, %v", v.State, err)
	}
}

// keyPress is a KeyPress event in xev's log, up to its keysym's name.
var keyPress = regexp.MustCompile(`(?s)KeyPress event.*?keysym 0x[0-9a-f]+, (\w+)\)`)

// keyPresses lists the keysyms of the KeyPress events in xev's log.
func keyPresses(log string) []string {
	var out []string
	for _, m := range keyPress.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1])
	}
	return out
}

// checkScreenshot checks that res is a PNG of the given width with a text line naming its sizes.
func checkScreenshot(t *testing.T, res *mcp.CallToolResult, width int) {
	t.Helper()
	var img *mcp.ImageContent
	for _, c := range res.Content {
		if ic, ok := mcp.AsImageContent(c); ok {
			img = ic
		}
	}
	if img == nil || img.MIMEType != "image/png" {
		t.Fatalf("screenshot result without a PNG: %+v", res.Content)
	}
	b, err := base64.StdEncoding.DecodeString(img.Data)
	if err != nil {
		t.Fatalf("screenshot data: %v", err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot PNG: %v", err)
	}
	if _, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Fatalf("screenshot PNG: %v", err)
	}
	text := mcpText(res)
	if cfg.Width != width || !strings.Contains(text, fmt.Sprintf("width %d, height %d", cfg.Width, cfg.Height)) ||
		!strings.Contains(text, "screen_width 1280") {
		t.Fatalf("screenshot %dx%d with text %q; want %d wide, the text naming its sizes", cfg.Width, cfg.Height, text, width)
	}
}
