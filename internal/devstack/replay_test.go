package devstack_test

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	_ "image/png" // step thumbnails
	"math"
	"os/exec"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/testutil"
	"github.com/loomhand/cocoonbox/internal/worker"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// testRecordedReplay records a run of five steps, each of the first four filling the screen
// with a colour of its own and taking a screenshot, with a person taking the desktop over and
// handing it back on the way. The recording's chunks are in the bucket and its row names the
// run; the replay page in headless chromium seeks to step 3 and shows that step's screen: the
// colour of its screenshot, not the steps' before or after it.
func testRecordedReplay(t *testing.T, a *agentEnv, models *modeltest.Server) {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: run make deps")
	}
	a.useProvider(agentvm.ProviderOpenAI)
	colors := []string{"#ff0000", "#00c000", "#0000ff", "#ffff00"}
	var turns []modeltest.Turn
	for k, c := range colors {
		turns = append(turns, modeltest.Calls(
			// The step's screenshot is of the terminal drawn: once its window shows, a moment more.
			modeltest.Call("shell", fmt.Sprintf(`{"command":"pkill -x xfce4-terminal; setsid -f runuser -u user -- env DISPLAY=:0 xfce4-terminal --disable-server --title rec-%d --color-bg='%s' --hide-menubar --hide-toolbar --hide-scrollbar --fullscreen </dev/null >/dev/null 2>&1; DISPLAY=:0 timeout 30 xdotool search --sync --onlyvisible --name '^rec-%d$' >/dev/null; sleep 1.5"}`, k+1, c, k+1)),
			modeltest.Call("desktop_screenshot", `{}`)))
	}
	models.Script(append(turns, modeltest.Reply("Four colours shown."))...)
	run, err := a.agents.StartRun(a.auth, &cbv1.StartRunRequest{Box: string(a.id), Task: "Show four colours.", Record: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.mustRun(t, "pkill -x xfce4-terminal || true")
	a.waitSteps(t, run.GetId(), 2)
	if _, err := a.api.TakeOver(a.auth, &cbv1.TakeOverRequest{Box: string(a.id)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the person holds the desktop a moment: the replay's take-over and hand-back marks
	if _, err := a.api.HandBack(a.auth, &cbv1.HandBackRequest{Box: string(a.id)}); err != nil {
		t.Fatal(err)
	}
	run = a.waitRun(t, run.GetId(), 3*time.Minute, string(cocoonbox.AgentRunSucceeded))
	if len(run.GetSteps()) != 5 {
		t.Fatalf("the recorded run took %d steps, want 5", len(run.GetSteps()))
	}
	var chunks int
	if err := testutil.Poll(a.ctx, time.Minute, func() error {
		rec, err := a.d.Store.RecordingOfRun(a.ctx, run.GetId())
		if err != nil {
			return err
		}
		if rec.Ended == nil || rec.Chunks == 0 {
			return fmt.Errorf("recording of %d chunks, ended %v", rec.Chunks, rec.Ended)
		}
		chunks = rec.Chunks
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := a.agents.GetRun(a.auth, &cbv1.GetRunRequest{RunId: run.GetId()}); err != nil || got.GetRecording().GetChunks() != int32(chunks) {
		t.Fatalf("the run's recording as GetRun says: %v, %v", got.GetRecording(), err)
	}
	for seq := range chunks {
		if _, err := a.d.Blobs.Stat(a.ctx, objstore.RecordingKey(run.GetId(), seq)); err != nil {
			t.Fatalf("chunk %d of the recording: %v", seq, err)
		}
	}
	shot := map[int][3]float64{}
	for _, n := range []int{2, 3, 4} {
		imgs, err := a.agents.GetStepImages(a.auth, &cbv1.GetStepImagesRequest{RunId: run.GetId(), Step: int32(n)})
		if err != nil || len(imgs.GetImages()) == 0 {
			t.Fatalf("step %d's screenshot: %v", n, err)
		}
		img, _, err := image.Decode(bytes.NewReader(imgs.GetImages()[0]))
		if err != nil {
			t.Fatal(err)
		}
		shot[n] = meanColor(img)
		if want := hexColor(colors[n-1]); colorDistance(shot[n], want) > 60 {
			t.Fatalf("step %d's screenshot is %.0f, not its terminal's %.0f", n, shot[n], want)
		}
	}

	page := openBrowser(t, a.ctx, bin)
	if err := page.Navigate(a.d.URLs().API + "/"); err != nil {
		t.Fatal(err)
	}
	if _, err := page.Eval(`(t) => localStorage.setItem('cocoonbox.token', t)`, a.token); err != nil {
		t.Fatal(err)
	}
	if err := page.Navigate(a.d.URLs().API + "/replay.html#/run/" + run.GetId()); err != nil {
		t.Fatal(err)
	}
	var markers []string
	if err := testutil.Poll(a.ctx, time.Minute, func() error {
		return evalInto(page, `() => { if (!window.cocoonboxReplay) throw new Error(document.getElementById('error').textContent || 'loading');
			return [...document.querySelectorAll('#markers button')].map(b => b.textContent) }`, &markers)
	}); err != nil {
		saveScreens(t, page)
		t.Fatal(err)
	}
	want := map[string]bool{"step 1": true, "step 3": true, "step 5": true, "taken over": true, "handed back": true}
	for _, m := range markers {
		delete(want, m)
	}
	if len(want) > 0 {
		t.Fatalf("the replay's marks are %q, missing %v", markers, want)
	}
	click(t, page, "#markers button", "^step 3$")
	var shown [3]float64
	if err := testutil.Poll(a.ctx, 30*time.Second, func() error {
		var c []float64
		if err := evalInto(page, `() => { const c = document.querySelector('#screen canvas'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
			let r = 0, g = 0, b = 0, n = 0; for (let i = 0; i < d.length; i += 4 * 61) { r += d[i]; g += d[i+1]; b += d[i+2]; n++ } return [r/n, g/n, b/n] }`, &c); err != nil {
			return err
		}
		copy(shown[:], c)
		if colorDistance(shown, shot[3]) > 40 {
			return fmt.Errorf("the replay at step 3 shows %.0f, step 3's screenshot %.0f", shown, shot[3])
		}
		return nil
	}); err != nil {
		saveScreens(t, page)
		t.Fatal(err)
	}
	for _, n := range []int{2, 4} {
		if d := colorDistance(shown, shot[n]); d < 100 {
			t.Fatalf("the replay at step 3 (%.0f) looks like step %d's screen (%.0f): the colours do not tell the steps apart", shown, n, shot[n])
		}
	}
	t.Logf("replay at step 3 shows %.0f, its screenshot %.0f; %d chunks, marks %q", shown, shot[3], chunks, markers)

	// A month on, the recording is past its retention: its chunks and its row go.
	keep := &worker.RecordingRetention{Store: a.d.Store, Blobs: a.d.Blobs, Keep: config.DefaultRecordings(),
		Now: func() time.Time { return time.Now().Add(31 * 24 * time.Hour) }}
	if n, err := keep.Once(a.ctx); err != nil || n < 1 {
		t.Fatalf("retention deleted %d recordings: %v", n, err)
	}
	if _, err := a.d.Store.RecordingOfRun(a.ctx, run.GetId()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the recording's row after its retention: %v", err)
	}
	if _, err := a.d.Blobs.Stat(a.ctx, objstore.RecordingKey(run.GetId(), 0)); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the recording's first chunk after its retention: %v", err)
	}
}

// waitSteps waits until the run has recorded n steps.
func (a *agentEnv) waitSteps(t *testing.T, id string, n int) {
	t.Helper()
	if err := testutil.Poll(a.ctx, 2*time.Minute, func() error {
		run, err := a.agents.GetRun(a.auth, &cbv1.GetRunRequest{RunId: id})
		if err != nil {
			return err
		}
		if len(run.GetSteps()) < n {
			return fmt.Errorf("%d steps", len(run.GetSteps()))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// hexColor is #rrggbb as red, green and blue.
func hexColor(s string) [3]float64 {
	var r, g, b int
	_, _ = fmt.Sscanf(s, "#%02x%02x%02x", &r, &g, &b)
	return [3]float64{float64(r), float64(g), float64(b)}
}

// meanColor is img's average red, green and blue, 0 to 255.
func meanColor(img image.Image) [3]float64 {
	var sum [3]float64
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			sum[0], sum[1], sum[2] = sum[0]+float64(r>>8), sum[1]+float64(g>>8), sum[2]+float64(bl>>8)
		}
	}
	n := float64(b.Dx() * b.Dy())
	return [3]float64{sum[0] / n, sum[1] / n, sum[2] / n}
}

func colorDistance(a, b [3]float64) float64 {
	return math.Sqrt((a[0]-b[0])*(a[0]-b[0]) + (a[1]-b[1])*(a[1]-b[1]) + (a[2]-b[2])*(a[2]-b[2]))
}

// testRecordsEveryRun: with the box's policy recording every run, a run started without
// --record is recorded; with it off again, the next is not.
func testRecordsEveryRun(t *testing.T, a *agentEnv, models *modeltest.Server) {
	a.useProvider(agentvm.ProviderOpenAI)
	policy := func(on bool) {
		t.Helper()
		b, err := a.api.SetPolicy(a.auth, &cbv1.SetPolicyRequest{Box: string(a.id), RecordRuns: &on})
		if err != nil || b.GetPolicy().GetRecordRuns() != on {
			t.Fatalf("set record_runs %v: %v, %v", on, b.GetPolicy(), err)
		}
	}
	run := func() string {
		t.Helper()
		models.Script(modeltest.Reply("Nothing to do."))
		r, err := a.agents.StartRun(a.auth, &cbv1.StartRunRequest{Box: string(a.id), Task: "Say so."})
		if err != nil {
			t.Fatal(err)
		}
		a.waitRun(t, r.GetId(), time.Minute, string(cocoonbox.AgentRunSucceeded))
		return r.GetId()
	}
	policy(true)
	recorded := run()
	if err := testutil.Poll(a.ctx, time.Minute, func() error {
		rec, err := a.d.Store.RecordingOfRun(a.ctx, recorded)
		if err == nil && rec.Ended == nil {
			err = errors.New("the recording has not ended")
		}
		return err
	}); err != nil {
		t.Fatalf("a run on a box that records every run: %v", err)
	}
	policy(false)
	plain := run()
	if _, err := a.d.Store.RecordingOfRun(a.ctx, plain); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a run once the box records no more: %v, want no recording", err)
	}
}
