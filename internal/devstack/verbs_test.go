package devstack_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
)

// testComputerVerbs: on the real XFCE desktop, the model's gui_plan is the run's plan; a
// script_run of ten actions (one of which opens a
// terminal window) is one step and one model turn; desktop_windows lists the window with its
// geometry; desktop_drag on its title bar moves it by the drag (the second listing says so); and
// desktop_zoom returns a region at the screen's full resolution.
func testComputerVerbs(t *testing.T, a *agentEnv, models *modeltest.Server) {
	// Anthropic's image limits keep the 1280x800 screen as it is: the drag and zoom are checked
	// in screen pixels (screenshots scaled per provider are testScreenScaling's).
	a.useProvider(agentvm.ProviderAnthropic)
	defer a.mustRun(t, "pkill -f 'title=drag-m[e]' || true") // the bracket keeps pkill from matching its own shell
	actions := []string{
		`{"tool":"shell","args":{"command":"DISPLAY=:0 setsid xfce4-terminal --disable-server --geometry=60x10+200+150 --title=drag-me >/dev/null 2>&1 </dev/null &"}}`,
		`{"tool":"wait","args":{"seconds":5}}`,
	}
	for i := range 8 {
		actions = append(actions, fmt.Sprintf(`{"tool":"desktop_move","args":{"x":%d,"y":10}}`, 10+i))
	}
	before := len(models.Requests())
	models.Script(
		modeltest.Calls(modeltest.Call("gui_plan", `{"items":[{"text":"open a terminal","status":"doing"},{"text":"move it","status":"todo"}]}`)),
		modeltest.Calls(modeltest.Call("script_run", `{"actions":[`+strings.Join(actions, ",")+`]}`)),
		modeltest.Calls(modeltest.Call("desktop_windows", `{}`)),
		modeltest.Calls(modeltest.Call("desktop_drag", `{"x1":350,"y1":175,"x2":650,"y2":475}`)),
		modeltest.Calls(modeltest.Call("desktop_windows", `{}`)),
		modeltest.Calls(modeltest.Call("desktop_zoom", `{"x":200,"y":150,"width":100,"height":40}`)),
		modeltest.Reply("Moved it."))
	run := a.start(t, "Open a terminal and move it.")
	got := a.waitRun(t, run.GetId(), 3*time.Minute, "succeeded", "failed", "cancelled")
	if got.GetState() != string(cocoonbox.AgentRunSucceeded) || got.GetStepsDone() != 7 || len(models.Requests())-before != 7 {
		t.Fatalf("the run: %s %q, %d steps, %d model calls; want 7 of each", got.GetState(), got.GetError(), got.GetStepsDone(), len(models.Requests())-before)
	}
	if plan := got.GetPlan(); len(plan) != 2 || plan[0].GetText() != "open a terminal" || plan[0].GetStatus() != "doing" {
		t.Fatalf("the run's plan: %v", plan)
	}
	script := toolResults(got, "script_run")
	if len(script) != 1 || !strings.Contains(script[0], "10. desktop_move") || got.GetSteps()[1].GetToolCalls()[0].GetIsError() {
		t.Fatalf("the script's one step: %q", script)
	}
	windows := toolResults(got, "desktop_windows")
	if len(windows) != 2 {
		t.Fatalf("desktop_windows results: %q", windows)
	}
	at := regexp.MustCompile(`"title":"drag-me","x":(\d+),"y":(\d+)`)
	pos := func(s string) (int, int) {
		m := at.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("no drag-me window in %s", s)
		}
		x, _ := strconv.Atoi(m[1])
		y, _ := strconv.Atoi(m[2])
		return x, y
	}
	x0, y0 := pos(windows[0])
	x1, y1 := pos(windows[1])
	if x1-x0 != 300 || y1-y0 != 300 {
		t.Fatalf("the window went from %d,%d to %d,%d; want the drag's 300,300 further", x0, y0, x1, y1)
	}
	if zoom := toolResults(got, "desktop_zoom"); len(zoom) != 1 || !strings.Contains(zoom[0], "100x40 screen pixels from 200,150") {
		t.Fatalf("desktop_zoom: %q", zoom)
	}
}
