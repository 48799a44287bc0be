package devstack_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// targetScript shows a 2x1-cell magenta block in a terminal, with the cursor hidden: a mark the
// scripted model finds in the screenshot it is sent, and the test finds on the screen.
const targetScript = `cat > /tmp/target.sh <<'EOF'
printf '\033[?25l\n  \033[48;2;255;0;255m  \033[0m'
exec sleep 900
EOF
chmod +x /tmp/target.sh
DISPLAY=:0 setsid xfce4-terminal --disable-server --geometry=20x4+300+200 --title=target -x /tmp/target.sh >/dev/null 2>&1 </dev/null &`

// testScreenScaling: at each of three screen sizes and for each provider, the screenshot the
// model is sent is within the provider's documented image limits, and a click the model gives
// at the middle of a mark it sees in it lands on that mark on the screen, within a pixel of the
// scaled image (xdotool getmouselocation).
func testScreenScaling(t *testing.T, a *agentEnv, models *modeltest.Server) {
	defer a.mustRun(t, "DISPLAY=:0 xrandr -s 1280x800; pkill -f 'title=targe[t]' || true")
	a.mustRun(t, targetScript)
	waitWindow(t, a, "target")
	for _, size := range []image.Point{{1280, 800}, {1920, 1080}, {2560, 1600}} {
		setScreen(t, a, size)
		if err := testutil.Poll(a.ctx, testutil.WaitShort, func() error {
			got := strings.TrimSpace(a.mustRun(t, "DISPLAY=:0 xdotool getdisplaygeometry"))
			if want := fmt.Sprintf("%d %d", size.X, size.Y); got != want {
				return fmt.Errorf("the screen is %s, want %s", got, want)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// The mark on the screen itself, at full resolution.
		full, err := a.d.Boxes.Screenshot(a.ctx, a.owner.ID, a.id, 0)
		if err != nil {
			t.Fatal(err)
		}
		mark := magenta(t, full.PNG)
		if mark.Empty() {
			t.Fatalf("%v: no magenta mark on the screen", size)
		}
		for _, provider := range []string{agentvm.ProviderAnthropic, agentvm.ProviderOpenAI} {
			a.useProvider(provider)
			a.mustRun(t, "DISPLAY=:0 xdotool mousemove 0 0")
			seen := make(chan image.Point, 1) // the size of the screenshot the model was sent
			models.Script(
				modeltest.Calls(modeltest.Call("desktop_screenshot", `{}`)),
				modeltest.Turn{Answer: func(body []byte) modeltest.Turn {
					imgs := modeltest.Images(body)
					if len(imgs) == 0 {
						return modeltest.Reply("I was sent no screenshot.")
					}
					shot := imgs[len(imgs)-1]
					cfg, err := png.DecodeConfig(bytes.NewReader(shot))
					if err != nil {
						return modeltest.Reply("The screenshot is not a PNG.")
					}
					seen <- image.Pt(cfg.Width, cfg.Height)
					m := magenta(t, shot)
					c := m.Min.Add(m.Max).Div(2)
					return modeltest.Calls(modeltest.Call("desktop_click", fmt.Sprintf(`{"x":%d,"y":%d}`, c.X, c.Y)))
				}},
				modeltest.Reply("Clicked it."))
			run := a.start(t, "Click the magenta mark.")
			got := a.waitRun(t, run.GetId(), time.Minute, "succeeded", "failed", "cancelled")
			if got.GetState() != string(cocoonbox.AgentRunSucceeded) || got.GetResult() != "Clicked it." {
				t.Fatalf("%s at %v: the run %s (%q), result %q", provider, size, got.GetState(), got.GetError(), got.GetResult())
			}
			var sent image.Point
			select {
			case sent = <-seen:
			default:
				t.Fatalf("%s at %v: the model never saw a screenshot", provider, size)
			}
			fit := agentvm.ScreenFits[provider]
			long, short := max(sent.X, sent.Y), min(sent.X, sent.Y)
			if fit.MaxLongEdge > 0 && long > fit.MaxLongEdge || fit.MaxShortEdge > 0 && short > fit.MaxShortEdge ||
				fit.MaxPixels > 0 && sent.X*sent.Y > fit.MaxPixels || sent.X == 0 {
				t.Fatalf("%s at %v: the model was sent a %v screenshot, past the provider's limits %+v", provider, size, sent, fit)
			}
			if !within(sent, size, 0.01) {
				t.Fatalf("%s at %v: the model was sent %v, not the screen's aspect", provider, size, sent)
			}
			at := mouse(t, a)
			// A pixel of the scaled image covers up to this many screen pixels each way.
			step := (size.X + sent.X - 1) / sent.X
			centre := mark.Min.Add(mark.Max).Div(2)
			if !at.In(mark) || abs(at.X-centre.X) > step || abs(at.Y-centre.Y) > step {
				t.Fatalf("%s at %v (sent %v): the click landed at %v; the mark is %v, its middle %v", provider, size, sent, at, mark, centre)
			}
		}
	}
}

// testAccessibility: the accessibility tree of a GTK window lists its buttons by name, with
// boxes whose middles press them.
func testAccessibility(t *testing.T, a *agentEnv, models *modeltest.Server) {
	a.useProvider(agentvm.ProviderAnthropic)
	defer a.mustRun(t, "pkill -x xfce4-about || true")
	a.mustRun(t, "DISPLAY=:0 setsid xfce4-about >/dev/null 2>&1 </dev/null &")
	waitWindow(t, a, "About the Xfce")
	models.Script(
		modeltest.Calls(modeltest.Call("desktop_accessibility", `{"window":"About the Xfce"}`)),
		modeltest.Reply("Read it."))
	run := a.start(t, "Read the about window.")
	got := a.waitRun(t, run.GetId(), time.Minute, "succeeded", "failed", "cancelled")
	if got.GetState() != string(cocoonbox.AgentRunSucceeded) {
		t.Fatalf("the run %s (%q)", got.GetState(), got.GetError())
	}
	if calls := got.GetSteps()[0].GetToolCalls(); len(calls) != 1 || calls[0].GetIsError() {
		t.Fatalf("desktop_accessibility: %v", calls)
	}
	// The whole tree, as the model was sent it (the step's record keeps its first KiB).
	reqs := models.Requests()
	tree := toolText(reqs[len(reqs)-1].Body, `window "About the Xfce`) // not the tool's description
	close := regexp.MustCompile(`(?m)^\s*push button "Close" (\d+),(\d+) (\d+)x(\d+)`).FindStringSubmatch(tree)
	if close == nil || !strings.Contains(tree, `push button "Help"`) {
		t.Fatalf("the about window's tree lists no Close and Help buttons:\n%s", tree)
	}
	// The box is where the button is: a click at its middle closes the window.
	x, _ := strconv.Atoi(close[1])
	y, _ := strconv.Atoi(close[2])
	w, _ := strconv.Atoi(close[3])
	h, _ := strconv.Atoi(close[4])
	models.Script(
		modeltest.Calls(modeltest.Call("desktop_click", fmt.Sprintf(`{"x":%d,"y":%d}`, x+w/2, y+h/2))),
		modeltest.Reply("Closed it."))
	run = a.start(t, "Close the about window.")
	if got := a.waitRun(t, run.GetId(), time.Minute, "succeeded", "failed", "cancelled"); got.GetState() != string(cocoonbox.AgentRunSucceeded) {
		t.Fatalf("the run %s (%q)", got.GetState(), got.GetError())
	}
	if err := testutil.Poll(a.ctx, testutil.WaitShort, func() error {
		if out, _ := a.run("pgrep -x xfce4-about"); out != "" {
			return fmt.Errorf("xfce4-about still runs (%s)", strings.TrimSpace(out))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// setScreen sets the box's screen size through RandR, adding the mode when Xvnc does not list it.
func setScreen(t *testing.T, a *agentEnv, size image.Point) {
	t.Helper()
	if _, err := a.run(fmt.Sprintf("DISPLAY=:0 xrandr -s %dx%d", size.X, size.Y)); err == nil {
		return
	}
	a.mustRun(t, fmt.Sprintf(`export DISPLAY=:0
mode=cb%[1]dx%[2]d
out=$(xrandr -q | awk '/ connected/ {print $1; exit}')
xrandr --newmode $mode 60 %[1]d %[1]d %[1]d %[1]d %[2]d %[2]d %[2]d %[2]d 2>/dev/null || true
xrandr --addmode "$out" $mode
xrandr --output "$out" --mode $mode`, size.X, size.Y))
}

// toolText returns the first string of a model request's body that holds mark (a tool result
// the agent sent), or "".
func toolText(body []byte, mark string) string {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	var found string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			if found == "" && strings.Contains(v, mark) {
				found = v
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	return found
}

// waitWindow waits until a window whose title holds title is on the display.
func waitWindow(t *testing.T, a *agentEnv, title string) {
	t.Helper()
	if err := testutil.Poll(a.ctx, testutil.WaitShort, func() error {
		out, _ := a.run(fmt.Sprintf("DISPLAY=:0 xdotool search --onlyvisible --name %q", title))
		if strings.TrimSpace(out) == "" {
			return fmt.Errorf("no window %q yet", title)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// magenta returns the bounds of the pure magenta pixels of a PNG (a scaled image's edges blend,
// so near magenta counts).
func magenta(t *testing.T, b []byte) image.Rectangle {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Errorf("decode a screenshot: %v", err)
		return image.Rectangle{}
	}
	var r image.Rectangle
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			if cr>>8 > 230 && cg>>8 < 25 && cb>>8 > 230 {
				r = r.Union(image.Rect(x, y, x+1, y+1))
			}
		}
	}
	return r
}

// mouse is where the box's pointer is, in screen pixels.
func mouse(t *testing.T, a *agentEnv) image.Point {
	t.Helper()
	out := a.mustRun(t, "DISPLAY=:0 xdotool getmouselocation")
	m := regexp.MustCompile(`x:(\d+) y:(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("xdotool getmouselocation: %q", out)
	}
	x, _ := strconv.Atoi(m[1])
	y, _ := strconv.Atoi(m[2])
	return image.Pt(x, y)
}

// within reports whether a and b have the same aspect, to frac.
func within(a, b image.Point, frac float64) bool {
	ra, rb := float64(a.X)/float64(a.Y), float64(b.X)/float64(b.Y)
	return ra/rb < 1+frac && rb/ra < 1+frac
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
