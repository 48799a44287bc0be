package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

func TestAgentRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	box := newBox(t, st, alice, "dev").ID

	nr := store.NewAgentRun{ID: "run_1", BoxID: box, Owner: alice, Task: "open the site", Provider: "openai", Model: "gpt"}
	r, err := st.CreateAgentRun(ctx, nr)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "run_1" || r.State != cocoonbox.AgentRunRunning || r.Task != nr.Task || r.Provider != "openai" ||
		r.Model != "gpt" || r.Owner != alice || r.BoxID != box || r.CreatedAt.IsZero() || !r.EndedAt.IsZero() {
		t.Fatalf("created %+v", r)
	}
	if _, err := st.CreateAgentRun(ctx, nr); err != nil {
		t.Fatalf("create again: %v", err)
	}
	other := nr
	other.Task = "something else"
	if _, err := st.CreateAgentRun(ctx, other); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("create with other fields: %v", err)
	}
	empty := nr
	empty.ID, empty.Task = "run_2", ""
	if _, err := st.CreateAgentRun(ctx, empty); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("create without task: %v", err)
	}
	unknown := nr
	unknown.ID, unknown.BoxID = "run_3", cocoonbox.NewBoxID()
	if _, err := st.CreateAgentRun(ctx, unknown); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("create on unknown box: %v", err)
	}
	second := nr
	second.ID = "run_4"
	if _, err := st.CreateAgentRun(ctx, second); err != nil {
		t.Fatal(err)
	}
	runs, err := st.ListAgentRuns(ctx, box)
	if err != nil || len(runs) != 2 || runs[0].ID != "run_4" || runs[1].ID != "run_1" {
		t.Fatalf("list = %+v, %v", runs, err)
	}

	if err := st.SetAgentRunState(ctx, "run_1", cocoonbox.AgentRunFailed, "model said no"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetAgentRunState(ctx, "run_1", cocoonbox.AgentRunFailed, "model said no"); err != nil {
		t.Fatalf("set the same final state again: %v", err)
	}
	if err := st.SetAgentRunState(ctx, "run_1", cocoonbox.AgentRunRunning, ""); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("revive an ended run: %v", err)
	}
	if err := st.SetAgentRunState(ctx, "run_nope", cocoonbox.AgentRunFailed, ""); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown run: %v", err)
	}
	if err := st.SetAgentRunState(ctx, "run_4", "bogus", ""); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("bogus state: %v", err)
	}
	r, err = st.AgentRunByID(ctx, "run_1")
	if err != nil || r.State != cocoonbox.AgentRunFailed || r.Error != "model said no" || r.EndedAt.IsZero() {
		t.Fatalf("after fail: %+v, %v", r, err)
	}
	if _, err := st.AgentRunByID(ctx, "run_nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown run: %v", err)
	}
}

func TestAgentSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	alice := newUser(t, st, "alice")
	box := newBox(t, st, alice, "dev").ID
	if _, err := st.CreateAgentRun(ctx, store.NewAgentRun{ID: "run_1", BoxID: box, Owner: alice, Task: "t", Model: "m"}); err != nil {
		t.Fatal(err)
	}
	step := func(n int, conv string) {
		t.Helper()
		err := st.AppendAgentStep(ctx, store.NewAgentStep{RunID: "run_1", Step: n, Kind: "model_turn",
			Summary: "said " + conv, Payload: json.RawMessage(`{"text":"` + conv + `"}`), Conversation: []byte(conv)})
		if err != nil {
			t.Fatal(err)
		}
	}
	step(1, "a")
	step(1, "a") // a retried activity
	step(2, "ab")
	step(3, "abc")
	steps, err := st.AgentSteps(ctx, "run_1")
	if err != nil || len(steps) != 3 {
		t.Fatalf("steps = %+v, %v", steps, err)
	}
	if s := steps[2]; s.Step != 3 || s.Kind != "model_turn" || s.Summary != "said abc" || s.At.IsZero() {
		t.Fatalf("step 3 = %+v", s)
	}
	var p struct{ Text string }
	if err := json.Unmarshal(steps[0].Payload, &p); err != nil || p.Text != "a" {
		t.Fatalf("payload %s: %v", steps[0].Payload, err)
	}
	if c, err := st.AgentConversation(ctx, "run_1", 2); err != nil || string(c) != "ab" {
		t.Fatalf("conversation 2 = %q, %v", c, err)
	}
	if c, err := st.AgentConversation(ctx, "run_1", 3); err != nil || string(c) != "abc" {
		t.Fatalf("conversation 3 = %q, %v", c, err)
	}
	if _, err := st.AgentConversation(ctx, "run_1", 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("conversation 1 should be cleared: %v", err)
	}
	if _, err := st.AgentConversation(ctx, "run_1", 9); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("conversation 9: %v", err)
	}
	if err := st.AppendAgentStep(ctx, store.NewAgentStep{RunID: "run_1", Step: 4, Kind: "Bad Kind"}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("bad kind: %v", err)
	}
	if err := st.AppendAgentStep(ctx, store.NewAgentStep{RunID: "run_nope", Step: 1, Kind: "model_turn"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown run: %v", err)
	}
}
