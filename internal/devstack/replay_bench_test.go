package devstack_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
)

// frameRateWindow is how long BenchmarkRecording counts a viewer's frames of a busy screen.
const frameRateWindow = 3 * time.Second

// BenchmarkRecording: what recording a desktop costs its viewers. FirstFrame and
// FirstFrameRecording are the desktop's first full frame through the edge without and with a
// recorder connected to the box (the recorder the run's activity is, writing its chunks to the
// stack's bucket), in turn; FramesPerSecond and FramesPerSecondRecording are the full frames a
// viewer gets per second of a screen that never rests (a terminal printing without end).
func BenchmarkRecording(b *testing.B) {
	e := newDesktopBench(b)
	ref, err := e.sandbox()
	if err != nil {
		b.Fatal(err)
	}
	runID := "run_" + strings.Repeat("b", 32)
	if _, err := e.d.Store.CreateAgentRun(e.ctx, store.NewAgentRun{ID: runID, BoxID: e.id, Owner: e.owner.ID, Task: "bench", Provider: "openai", Model: "bench"}); err != nil {
		b.Fatal(err)
	}
	rec := &activities.Recorder{Client: e.eng, Tokens: boxToken{ref}, Blobs: e.d.Blobs, Store: e.d.Store}
	recording := func() (stop func()) {
		ctx, cancel := context.WithCancel(e.ctx)
		done := make(chan error, 1)
		go func() { done <- rec.RecordDesktop(ctx, activities.RecordInput{RunID: runID, BoxID: e.id}) }()
		time.Sleep(time.Second) // connected and past its first full frame
		return func() {
			cancel()
			if err := <-done; err != nil {
				b.Errorf("recorder: %v", err)
			}
		}
	}
	firstFrame := func(b *testing.B) time.Duration {
		e.waitViewers(b, 0)
		time.Sleep(boxBenchPause)
		return since(b, func() error {
			c, err := e.open(e.ctx, false)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			_, err = c.frame()
			return err
		})
	}
	interleaved(b, 15,
		timed{"FirstFrame", firstFrame},
		timed{"FirstFrameRecording", func(b *testing.B) time.Duration {
			stop := recording()
			defer stop()
			return firstFrame(b)
		}},
	)

	e.mustRun(b, `setsid -f runuser -u user -- env DISPLAY=:0 xfce4-terminal --disable-server --title busy --fullscreen -x sh -c 'while :; do date +%N; done' </dev/null >/dev/null 2>&1`)
	defer e.mustRun(b, "pkill -x xfce4-terminal || true")
	time.Sleep(2 * time.Second)
	// frames counts a viewer's full frames for frameRateWindow; the sample is the time one frame took.
	frames := func() time.Duration {
		c, err := e.open(e.ctx, false)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		n, start := 0, time.Now()
		for time.Since(start) < frameRateWindow {
			if _, err := c.frame(); err != nil {
				b.Fatal(err)
			}
			n++
		}
		return time.Since(start) / time.Duration(n)
	}
	var plain, recorded []time.Duration
	for range 5 {
		plain = append(plain, frames())
		stop := recording()
		recorded = append(recorded, frames())
		stop()
	}
	b.Run("FramesPerSecond", func(b *testing.B) {
		for b.Loop() {
		}
		benchreport.Rate(b, 1, "frames/s", plain)
	})
	b.Run("FramesPerSecondRecording", func(b *testing.B) {
		for b.Loop() {
		}
		benchreport.Rate(b, 1, "frames/s", recorded)
	})
}

// boxToken is the benchmark box's sandbox, as the worker's token store would give it.
type boxToken struct{ ref sandbox.SandboxRef }

func (t boxToken) SandboxToken(context.Context, string) (sandbox.SandboxRef, error) {
	return t.ref, nil
}
func (t boxToken) PutSandboxToken(context.Context, string, sandbox.SandboxRef) error { return nil }
