package devstack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// testAskUser: the agent asks its starter a question (ask_user); the run waits in
// waiting_for_user with the question, the box hibernates after its (short) idle period meanwhile,
// and the answer wakes the box and reaches the model as the question's result in the next call.
func testAskUser(t *testing.T, a *agentEnv, models *modeltest.Server) {
	a.useProvider(agentvm.ProviderOpenAI)
	v, err := a.d.Boxes.Get(a.ctx, a.owner.ID, a.id)
	if err != nil {
		t.Fatal(err)
	}
	p := v.Policy
	idle := p.IdleAfter
	p.IdleAfter = 5 * time.Second
	if _, err := a.d.Boxes.SetPolicy(a.ctx, a.owner.ID, a.id, p); err != nil {
		t.Fatal(err)
	}
	defer func() {
		p.IdleAfter = idle
		if _, err := a.d.Boxes.SetPolicy(a.ctx, a.owner.ID, a.id, p); err != nil {
			t.Error(err)
		}
	}()
	models.Script(
		modeltest.Calls(modeltest.ToolCall{ID: "call_ask", Name: agentvm.AskUser, Arguments: `{"question":"Blue or green?"}`}),
		modeltest.Reply("Blue it is."))
	run := a.start(t, "Pick a color with me.")
	waiting := a.waitRun(t, run.GetId(), 3*time.Minute, "waiting_for_user", "succeeded", "failed")
	if waiting.GetState() != string(cocoonbox.AgentRunWaitingForUser) || waiting.GetQuestion() != "Blue or green?" || waiting.GetError() != "" {
		t.Fatalf("the run after the question: %s, question %q, error %q", waiting.GetState(), waiting.GetQuestion(), waiting.GetError())
	}
	var seen string
	testutil.Eventually(t, 2*time.Minute, "the box hibernates while the run waits", func() bool {
		v, err := a.d.Boxes.Get(a.ctx, a.owner.ID, a.id)
		seen = fmt.Sprintf("%s, %v", v.State, err)
		return err == nil && v.State == cocoonbox.BoxStateHibernated
	}, &seen)
	calls := len(models.Requests())

	if _, err := a.agents.SendMessage(a.auth, &cbv1.SendMessageRequest{RunId: run.GetId(), Text: "blue"}); err != nil {
		t.Fatal(err)
	}
	done := a.waitRun(t, run.GetId(), 3*time.Minute, "succeeded", "failed", "cancelled")
	if done.GetState() != string(cocoonbox.AgentRunSucceeded) || done.GetResult() != "Blue it is." {
		t.Fatalf("the run after the answer: %s %q %q", done.GetState(), done.GetError(), done.GetResult())
	}
	reqs := models.Requests()
	if len(reqs) != calls+1 {
		t.Fatalf("%d model calls after the answer; want 1", len(reqs)-calls)
	}
	if body := string(reqs[len(reqs)-1].Body); !strings.Contains(body, agentvm.Answered+"blue") || !strings.Contains(body, `"tool_call_id":"call_ask"`) {
		t.Fatalf("the call after the answer does not carry it as call_ask's result: %s", body)
	}
	if v, err := a.d.Boxes.Get(a.ctx, a.owner.ID, a.id); err != nil || v.State != cocoonbox.BoxStateRunning {
		t.Fatalf("the box after the answer: %+v, %v; want running (woken for the step)", v.Status, err)
	}
}
