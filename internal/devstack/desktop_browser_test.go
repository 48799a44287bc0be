package devstack_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/proto"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// The desktop end to end: real desktop boxes (XFCE on TigerVNC's Xvnc), seen through the API's
// desktop edge by the web app in a headless Chromium and by raw RFB clients.

// TestDesktopInBrowser signs in to the web app in Chromium, opens a desktop box and checks that
// the noVNC canvas shows the XFCE desktop; that in view mode the mouse does not reach the box;
// that after Take over it does; and that while the browser holds control, a second control
// connection is refused.
func TestDesktopInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: run make deps")
	}
	cfg := boxConfig(t)
	cfg.Template = "desktop"
	e := newDesktopEnv(t, cfg, 5*time.Minute)
	page := openBrowser(t, e.ctx, bin)

	// Sign in with the dev token and open the box from the list.
	if err := page.Navigate(e.d.URLs().API + "/"); err != nil {
		t.Fatal(err)
	}
	step(t, "type the token", func() error {
		el, err := page.Element("#token")
		if err != nil {
			return err
		}
		return el.Input(e.token)
	})
	click(t, page, "#signin-form button[type=submit]", "")
	click(t, page, "#box-list button", "^Open$")

	// Installable: the browser runs the app's service worker (it keeps the app's files for an
	// installed window opened offline).
	var worker string
	if err := testutil.Poll(e.ctx, testutil.WaitShort, func() error {
		if err := evalInto(page, `() => navigator.serviceWorker.ready.then(r => r.active ? r.active.scriptURL : "")`, &worker); err != nil {
			return err
		}
		if !strings.HasSuffix(worker, "/sw.js") {
			return fmt.Errorf("active service worker %q", worker)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The canvas shows the desktop: the whole 1280x800 screen, lit, in more than a few colours
	// (black is all a fresh Xvnc shows until the session draws), and settled: the same for the
	// last second, so the screenshot is of the desktop, not of the session drawing it.
	var shown canvasStats
	same := 0
	if err := testutil.Poll(e.ctx, time.Minute, func() error {
		last := shown
		if err := evalInto(page, canvasStatsJS, &shown); err != nil {
			return err
		}
		if shown.W != 1280 || shown.H != 800 || shown.Lit < 0.5 || shown.Colors < 8 {
			return fmt.Errorf("canvas %+v, want 1280x800, at least half lit, 8 colours", shown)
		}
		if same++; shown != last {
			same = 0
		}
		if same < 10 {
			return fmt.Errorf("canvas %+v, still changing", shown)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("canvas %+v", shown)
	saveScreens(t, page)

	// View mode: the pointer over the canvas does not move the box's.
	before := e.pointer(t)
	target := point{320, 560}
	if before == target {
		target = point{330, 570}
	}
	step(t, "move over the canvas", func() error { return moveOver(page, target) })
	if err := consistently(e.ctx, time.Second, func() error {
		if p := e.pointer(t); p != before {
			return fmt.Errorf("box pointer moved from %v to %v in view mode", before, p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Take over: the app reconnects in control mode, and the pointer follows the mouse. The first
	// moves may reach the old connection or none, so move until one lands.
	click(t, page, "#takeover", "")
	var at point
	if err := testutil.Poll(e.ctx, 30*time.Second, func() error {
		// The canvas is replaced while the app reconnects in control mode.
		if err := moveOver(page, point{target.x + 4, target.y}); err != nil {
			return err
		}
		if err := moveOver(page, target); err != nil {
			return err
		}
		if at = e.pointer(t); at.near(target) {
			return nil
		}
		return fmt.Errorf("box pointer at %v after moving to %v in control mode", at, target)
	}); err != nil {
		t.Fatal(err)
	}

	// One controller: a native client of the same user is refused while the browser holds it.
	bearer := http.Header{"Authorization": {"Bearer " + e.token}}
	resp := expectHTTP(e.ctx, t, e.wsBase+"/v1/boxes/"+string(e.id)+"/desktop?mode=control", bearer, http.StatusConflict)
	if !strings.Contains(resp, "already has a controller connection") {
		t.Fatalf("second control connection: %s", resp)
	}
	t.Logf("box pointer at %v through view mode, at %v after take over", before, at)

	// Fork: the app opens the fork, whose desktop shows the same screen, and lists it as a fork.
	click(t, page, "#fork", "")
	var name string
	if err := testutil.Poll(e.ctx, time.Minute, func() error {
		if err := evalInto(page, `() => document.getElementById("box-name").textContent`, &name); err != nil {
			return err
		}
		if name != "desk-fork-1" {
			return fmt.Errorf("the page shows box %q", name)
		}
		var forked canvasStats
		if err := evalInto(page, canvasStatsJS, &forked); err != nil {
			return err
		}
		if forked.W != 1280 || forked.H != 800 || forked.Lit < 0.5 || forked.Colors < 8 {
			return fmt.Errorf("the fork's canvas %+v", forked)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	click(t, page, "#back", "")
	if err := testutil.Poll(e.ctx, testutil.WaitShort, func() error {
		var rows string
		if err := evalInto(page, `() => document.getElementById("box-list").textContent`, &rows); err != nil {
			return err
		}
		if !strings.Contains(rows, "desk-fork-1 (fork of desk)") {
			return fmt.Errorf("the box list reads %q", rows)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestDesktopViewersAndSession opens two view connections and one control connection to a
// desktop box with raw RFB clients, each of which gets a frame, and checks the viewers count;
// then, all closed, hibernates the box and opens its desktop again, which wakes it into the same
// X session: the same window, the same Xvnc and window manager processes.
func TestDesktopViewersAndSession(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cfg := boxConfig(t)
	cfg.Template = "desktop"
	e := newDesktopEnv(t, cfg, 5*time.Minute)
	ctx := e.ctx

	if _, err := e.d.Boxes.TakeOver(ctx, e.owner.ID, e.id); err != nil {
		t.Fatal(err)
	}
	var conns []*rfbConn
	for i, control := range []bool{false, false, true} {
		c, err := e.open(ctx, control)
		if err != nil {
			t.Fatalf("connection %d (control %v): %v", i, control, err)
		}
		t.Cleanup(func() { _ = c.Close() })
		conns = append(conns, c)
	}
	for i, c := range conns {
		if rects, err := c.frame(); err != nil {
			t.Fatalf("connection %d: frame: %v", i, err)
		} else if rects == 0 {
			t.Fatalf("connection %d: a frame of no rectangles", i)
		}
	}
	e.waitViewers(t, 3)

	procs := e.mustRun(t, "pgrep -x Xvnc && pgrep -x xfwm4")
	e.mustRun(t, "setsid -f runuser -u user -- env DISPLAY=:0 xfce4-terminal --disable-server --title marker -x sleep infinity </dev/null >/dev/null 2>&1")
	var window string
	if err := testutil.Poll(ctx, 30*time.Second, func() error {
		var err error
		window, err = e.run("runuser -u user -- env DISPLAY=:0 xdotool search --name '^marker$'")
		return err
	}); err != nil {
		t.Fatalf("the marker window: %v", err)
	}

	for _, c := range conns {
		_ = c.Close()
	}
	e.waitViewers(t, 0)
	if _, err := e.d.Boxes.HandBack(ctx, e.owner.ID, e.id); err != nil {
		t.Fatal(err)
	}
	if v, err := e.d.Boxes.Hibernate(ctx, e.owner.ID, e.id); err != nil || v.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("hibernate: %+v, %v", v.State, err)
	}

	// Opening the desktop wakes the box, before anything else touches it.
	c, err := e.open(ctx, false)
	if err != nil {
		t.Fatalf("desktop of the hibernated box: %v", err)
	}
	defer c.Close()
	if _, err := c.frame(); err != nil {
		t.Fatalf("frame after wake: %v", err)
	}
	if got := e.mustRun(t, "runuser -u user -- env DISPLAY=:0 xdotool search --name '^marker$'"); got != window {
		t.Fatalf("marker window after wake %q, want %q", got, window)
	}
	if got := e.mustRun(t, "pgrep -x Xvnc && pgrep -x xfwm4"); got != procs {
		t.Fatalf("Xvnc and xfwm4 PIDs after wake %q, want %q", got, procs)
	}
	t.Logf("window %s and Xvnc, xfwm4 PIDs %v kept through hibernate and wake", strings.TrimSpace(window), strings.Fields(procs))
}

// openBrowser starts Debian's Chromium, headless, and opens a blank page bounded by ctx. The
// browser is killed at cleanup. The binary is set explicitly so rod never downloads one.
func openBrowser(t *testing.T, ctx context.Context, bin string) *rod.Page {
	t.Helper()
	l := launcher.New().Bin(bin).Headless(true).NoSandbox(true).Set("window-size", "1440,1000")
	u, err := l.Launch()
	if err != nil {
		t.Fatalf("launch chromium: %v", err)
	}
	t.Cleanup(func() {
		l.Kill()
		l.Cleanup()
	})
	browser := rod.New().ControlURL(u).NoDefaultDevice().Context(ctx)
	if err := browser.Connect(); err != nil {
		t.Fatalf("connect to chromium: %v", err)
	}
	page, err := browser.Page(proto.TargetCreateTarget{})
	if err != nil {
		t.Fatal(err)
	}
	if err := (proto.EmulationSetDeviceMetricsOverride{Width: 1440, Height: 1000, DeviceScaleFactor: 1}).Call(page); err != nil {
		t.Fatal(err)
	}
	return page
}

// step runs one browser action, ending the test with what failed.
func step(t *testing.T, what string, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// click waits for the element selector picks (and whose text matches re, when given) and clicks
// it.
func click(t *testing.T, page *rod.Page, selector, re string) {
	t.Helper()
	step(t, "click "+selector+" "+re, func() error {
		var el *rod.Element
		var err error
		if re == "" {
			el, err = page.Element(selector)
		} else {
			el, err = page.ElementR(selector, re)
		}
		if err != nil {
			return err
		}
		return el.Click(proto.InputMouseButtonLeft, 1)
	})
}

// evalInto evaluates the JavaScript function js in the page and decodes its result into v.
func evalInto(page *rod.Page, js string, v any) error {
	res, err := page.Eval(js)
	if err != nil {
		return err
	}
	return res.Value.Unmarshal(v)
}

// canvasStats sums up noVNC's canvas: its size, the share of sampled pixels that are not black,
// how many colours they have and a hash of them.
type canvasStats struct {
	W, H   int
	Lit    float64
	Colors int
	Sum    int // a hash of the colours, to see the picture change
}

// canvasStatsJS samples every 8th pixel of every 8th row of the canvas.
const canvasStatsJS = `() => {
	const c = document.querySelector('#screen canvas');
	if (!c || !c.width || !c.height) return {W: 0, H: 0, Lit: 0, Colors: 0};
	const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
	let lit = 0, n = 0;
	const colors = new Set();
	for (let y = 0; y < c.height; y += 8) {
		for (let x = 0; x < c.width; x += 8) {
			const i = (y * c.width + x) * 4;
			n++;
			if (d[i] || d[i + 1] || d[i + 2]) lit++;
			colors.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
		}
	}
	let sum = 0;
	for (const c of colors) sum = (sum * 31 + c) % 1000000007;
	return {W: c.width, H: c.height, Lit: lit / n, Colors: colors.size, Sum: sum};
}`

// saveScreens writes the canvas (the box's screen at its own size) and the page as PNGs under
// $COCOONBOX_TEST_ARTIFACTS/<test>, or the test's temporary directory, and logs where.
func saveScreens(t *testing.T, page *rod.Page) {
	t.Helper()
	dir := artifactDir(t)
	var url string
	if err := evalInto(page, `() => document.querySelector('#screen canvas').toDataURL('image/png')`, &url); err != nil {
		t.Fatal(err)
	}
	canvas, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(url, "data:image/png;base64,"))
	if err != nil {
		t.Fatalf("canvas data URL: %v", err)
	}
	shot, err := page.Screenshot(false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, png := range map[string][]byte{"desktop.png": canvas, "page.png": shot} {
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots: %s (desktop.png: the canvas, page.png: the web app)", dir)
}

// artifactDir is where a test leaves files for a person to look at:
// $COCOONBOX_TEST_ARTIFACTS/<test>, or the test's temporary directory.
func artifactDir(t *testing.T) string {
	t.Helper()
	base, ok := config.Env()("COCOONBOX_TEST_ARTIFACTS")
	if !ok || base == "" {
		return t.TempDir()
	}
	dir := filepath.Join(base, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// point is a position on the box's screen.
type point struct{ x, y int }

// near reports whether p is within 3 pixels of q each way: the canvas is scaled to the page, so
// a page position maps to a box pixel only to within the scale's rounding.
func (p point) near(q point) bool {
	return p.x-q.x <= 3 && q.x-p.x <= 3 && p.y-q.y <= 3 && q.y-p.y <= 3
}

// moveOver moves the browser's mouse to where the canvas shows the box's pixel p. There is no
// canvas while the app connects (a take-over replaces the connection): an error to retry on.
func moveOver(page *rod.Page, p point) error {
	var r struct{ X, Y, W, H float64 }
	if err := evalInto(page, `() => {
			const c = document.querySelector('#screen canvas');
			if (!c) throw new Error('no desktop canvas (the app is connecting)');
			const r = c.getBoundingClientRect();
			return {X: r.left, Y: r.top, W: r.width / c.width, H: r.height / c.height};
		}`, &r); err != nil {
		return fmt.Errorf("find the canvas: %w", err)
	}
	at := proto.Point{X: r.X + (float64(p.x)+0.5)*r.W, Y: r.Y + (float64(p.y)+0.5)*r.H}
	if err := page.Mouse.MoveTo(at); err != nil {
		return fmt.Errorf("move the mouse to %v: %w", at, err)
	}
	return nil
}

// pointer is where the box's X pointer is.
func (e *desktopEnv) pointer(t *testing.T) point {
	t.Helper()
	var p point
	out := e.mustRun(t, "runuser -u user -- env DISPLAY=:0 xdotool getmouselocation")
	if _, err := fmt.Sscanf(out, "x:%d y:%d", &p.x, &p.y); err != nil {
		t.Fatalf("xdotool getmouselocation %q: %v", out, err)
	}
	return p
}

// consistently checks that check holds, polling, for the whole of within: the mirror of waitFor
// for what must not happen.
func consistently(ctx context.Context, within time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := check(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
