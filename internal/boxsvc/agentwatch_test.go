package boxsvc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// runEnv is a box with a run on it, owned by ann and shared with viewer vic.
type runEnv struct {
	st       *store.Store
	svc      *boxsvc.Service
	box      cocoonbox.BoxID
	ann, vic string
	run      string
}

func newRunEnv(t *testing.T) runEnv {
	t.Helper()
	ctx := context.Background()
	st := storetest.New(t)
	e := runEnv{st: st, svc: &boxsvc.Service{Store: st, WatchEvery: 10 * time.Millisecond}, box: cocoonbox.NewBoxID(), run: "run_w"}
	for _, u := range []struct {
		name string
		id   *string
	}{{"ann", &e.ann}, {"vic", &e.vic}} {
		user, err := st.CreateUser(ctx, store.NewUser{Name: u.name})
		if err != nil {
			t.Fatal(err)
		}
		*u.id = user.ID
	}
	if _, err := st.CreateBox(ctx, store.NewBox{ID: e.box, Owner: e.ann, Name: "dev", Size: cocoonbox.DefaultSize}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutShare(ctx, e.box, e.vic, cocoonbox.RoleViewer, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateAgentRun(ctx, store.NewAgentRun{ID: e.run, BoxID: e.box, Owner: e.ann, Task: "look", Provider: "openai", Model: "m"}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e runEnv) step(t *testing.T, n int, text string) {
	t.Helper()
	payload, _ := json.Marshal(map[string]any{"text": text, "tool_calls": []map[string]any{{"name": "shell", "is_error": n == 1, "result": "ok"}}})
	if err := e.st.AppendAgentStep(context.Background(), store.NewAgentStep{RunID: e.run, Step: n, Kind: "model_turn",
		Summary: fmt.Sprintf("step %d", n), Payload: payload}); err != nil {
		t.Fatal(err)
	}
}

// event is a RunEvent in brief, for comparing sequences.
func event(e boxsvc.RunEvent) string {
	if e.Step != nil {
		return fmt.Sprintf("step %d", e.Step.Step)
	}
	if e.Text != nil {
		return fmt.Sprintf("text %d %q", e.Text.Step, e.Text.Text)
	}
	return fmt.Sprintf("run %s %d %q %q", e.Run.State, e.Run.StepsDone, e.Run.Result, e.Run.Error)
}

// expectEvent waits for the next event of a watch and fails the test unless it is want.
func expectEvent(t *testing.T, ctx context.Context, events <-chan string, want string) {
	t.Helper()
	select {
	case got := <-events:
		if got != want {
			t.Fatalf("event %q, want %q", got, want)
		}
	case <-ctx.Done():
		t.Fatalf("no event; want %q", want)
	}
}

// TestWatchRun follows a run from its recorded steps through new ones to its end: the steps
// already there come first, then the run, then each change once, and the watch ends after the
// final state.
func TestWatchRun(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.step(t, 1, "looking")

	events := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		done <- e.svc.WatchRun(ctx, e.vic, e.run, func(ev boxsvc.RunEvent) error {
			events <- event(ev)
			return nil
		})
	}()
	next := func(want string) { t.Helper(); expectEvent(t, ctx, events, want) }
	next("step 1")
	next(`run running 1 "looking" ""`)
	if err := e.st.SetAgentRunState(ctx, e.run, cocoonbox.AgentRunWaiting, ""); err != nil {
		t.Fatal(err)
	}
	next(`run waiting 1 "looking" ""`)
	e.step(t, 2, "")
	next("step 2")
	e.step(t, 2, "retried") // a retried step's row is replaced: the follower hears it again
	next("step 2")
	e.step(t, 3, "the site is up")
	if err := e.st.SetAgentRunState(ctx, e.run, cocoonbox.AgentRunSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	// A poll may land between the step and the state; either way, step 3 before the end.
	next("step 3")
	next(`run succeeded 3 "the site is up" ""`)
	if err := <-done; err != nil {
		t.Fatalf("watch ended with %v", err)
	}
	if len(events) != 0 {
		t.Fatalf("events after the end: %q", <-events)
	}

	// An ended run: its steps and its final state, then the end.
	var seen []string
	if err := e.svc.WatchRun(ctx, e.ann, e.run, func(ev boxsvc.RunEvent) error {
		seen = append(seen, event(ev))
		return nil
	}); err != nil || fmt.Sprint(seen) != `[step 1 step 2 step 3 run succeeded 3 "the site is up" ""]` {
		t.Fatalf("watch of an ended run: %q, %v", seen, err)
	}
}

// TestWatchRunStreamsText: the model's text a worker publishes for a step not yet recorded
// reaches the run's followers as it comes; text of a step already recorded, and of other runs,
// does not.
func TestWatchRunStreamsText(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.step(t, 1, "looking")
	events := make(chan string, 100)
	go func() {
		_ = e.svc.WatchRun(ctx, e.vic, e.run, func(ev boxsvc.RunEvent) error {
			events <- event(ev)
			return nil
		})
	}()
	next := func(want string) { t.Helper(); expectEvent(t, ctx, events, want) }
	next("step 1")
	next(`run running 1 "looking" ""`)
	// The hub listens from the first follower on; publish until the first piece arrives.
	var first string
	for first == "" {
		if err := e.st.NotifyRunText(ctx, store.RunText{Run: e.run, Step: 2, Text: "The "}); err != nil {
			t.Fatal(err)
		}
		select {
		case first = <-events:
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no streamed text reached the follower")
		}
	}
	if first != `text 2 "The "` {
		t.Fatalf("first streamed event %q", first)
	}
	for _, rt := range []store.RunText{{Run: "run_other", Step: 2, Text: "not mine"}, {Run: e.run, Step: 1, Text: "old"}, {Run: e.run, Step: 2, Text: "site is up."}} {
		if err := e.st.NotifyRunText(ctx, rt); err != nil {
			t.Fatal(err)
		}
	}
	for {
		var got string
		select {
		case got = <-events:
		case <-ctx.Done():
			t.Fatal("step 2's next piece did not reach the follower")
		}
		if got == `text 2 "The "` {
			continue // a repeat of the first piece, published before the hub heard it
		}
		if got != `text 2 "site is up."` {
			t.Fatalf("event %q; want step 2's next piece alone", got)
		}
		break
	}
}

// TestWatchRunAccess: a stranger's watch is not found; a share revoked mid-watch ends it with
// not found; a failing send ends it with the send's error.
func TestWatchRunAccess(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stranger, err := e.st.CreateUser(ctx, store.NewUser{Name: "sam"})
	if err != nil {
		t.Fatal(err)
	}
	nop := func(boxsvc.RunEvent) error { return nil }
	if err := e.svc.WatchRun(ctx, stranger.ID, e.run, nop); cocoonbox.ErrorCode(err) != cocoonbox.ENotFound {
		t.Fatalf("stranger: %v, want not found", err)
	}
	if err := e.svc.WatchRun(ctx, e.ann, "run_nope", nop); cocoonbox.ErrorCode(err) != cocoonbox.ENotFound {
		t.Fatalf("unknown run: %v, want not found", err)
	}

	started := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- e.svc.WatchRun(ctx, e.vic, e.run, func(boxsvc.RunEvent) error {
			started <- struct{}{}
			return nil
		})
	}()
	<-started
	if err := e.st.DeleteShare(ctx, e.box, e.vic); err != nil {
		t.Fatal(err)
	}
	if err := <-done; cocoonbox.ErrorCode(err) != cocoonbox.ENotFound {
		t.Fatalf("revoked mid-watch: %v, want not found", err)
	}

	gone := errors.New("client went away")
	if err := e.svc.WatchRun(ctx, e.ann, e.run, func(boxsvc.RunEvent) error { return gone }); !errors.Is(err, gone) {
		t.Fatalf("failing send: %v", err)
	}

	// The caller leaving ends the watch quietly.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if err := e.svc.WatchRun(cctx, e.ann, e.run, nop); err != nil {
		t.Fatalf("cancelled: %v", err)
	}
}

// TestStepImages: a viewer of the box reads a step's images in order; a step the run lacks and a
// step number below 1 are refused, naming why; a stranger learns nothing of the run.
func TestStepImages(t *testing.T) {
	e := newRunEnv(t)
	ctx := context.Background()
	shots := [][]byte{[]byte("\x89PNG one"), []byte("\x89PNG two")}
	if err := e.st.AppendAgentStep(ctx, store.NewAgentStep{RunID: e.run, Step: 1, Kind: "model_turn", Images: shots}); err != nil {
		t.Fatal(err)
	}
	e.step(t, 2, "no images")
	got, err := e.svc.StepImages(ctx, e.vic, e.run, 1)
	if err != nil || len(got) != 2 || string(got[0]) != string(shots[0]) || string(got[1]) != string(shots[1]) {
		t.Fatalf("step 1's images for a viewer: %q, %v", got, err)
	}
	if got, err := e.svc.StepImages(ctx, e.ann, e.run, 2); err != nil || len(got) != 0 {
		t.Fatalf("step 2's images: %q, %v; want none", got, err)
	}
	if _, err := e.svc.StepImages(ctx, e.ann, e.run, 3); cocoonbox.ErrorCode(err) != cocoonbox.ENotFound {
		t.Fatalf("a step the run lacks: %v", err)
	}
	if _, err := e.svc.StepImages(ctx, e.ann, e.run, 0); cocoonbox.ErrorField(err) != "step" {
		t.Fatalf("step 0: %v; want an error naming step", err)
	}
	stranger, err := e.st.CreateUser(ctx, store.NewUser{Name: "stranger"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.StepImages(ctx, stranger.ID, e.run, 1); cocoonbox.ErrorCode(err) != cocoonbox.ENotFound {
		t.Fatalf("a stranger: %v; want not found", err)
	}
}
