package agentvm_test

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
)

// TestStepAsksTheUser: a model's ask_user call ends the step with the question and no result; the
// next step's message is the answer, which the model gets as that call's result in its protocol.
func TestStepAsksTheUser(t *testing.T) {
	for _, provider := range providers {
		t.Run(provider, func(t *testing.T) {
			srv := modeltest.NewServer(t, testKey,
				modeltest.Calls(modeltest.ToolCall{ID: "call_ask1", Name: "ask_user", Arguments: `{"question":"Blue or green?"}`}),
				modeltest.Reply("Painted it blue."))
			var n atomic.Int32
			loop := newLoop(t.TempDir(), &n)
			resp, err := loop.Step(t.Context(), stepRequest(srv, provider, 1, nil))
			require.NoError(t, err)
			require.False(t, resp.Done)
			require.Equal(t, "Blue or green?", resp.Question)
			require.Len(t, resp.ToolCalls, 1)
			require.Equal(t, agentvm.AskUser, resp.ToolCalls[0].Name)
			require.Contains(t, string(srv.Requests()[0].Body), `"ask_user"`, "the model is offered the tool")

			req := stepRequest(srv, provider, 2, resp.Messages)
			req.Message = "blue, please"
			resp, err = loop.Step(t.Context(), req)
			require.NoError(t, err)
			require.True(t, resp.Done)
			require.Empty(t, resp.Question)

			// The answer went back as the ask_user call's result, in the protocol's own shape.
			body := srv.Requests()[1].JSON()
			msgs, _ := body["messages"].([]any)
			var answered bool
			for _, m := range msgs {
				raw, _ := json.Marshal(m)
				s := string(raw)
				if strings.Contains(s, agentvm.Answered+"blue, please") &&
					(strings.Contains(s, `"tool_call_id":"call_ask1"`) || strings.Contains(s, `"tool_use_id":"call_ask1"`)) {
					answered = true
				}
			}
			require.True(t, answered, "the answer is not call_ask1's result: %s", srv.Requests()[1].Body)
		})
	}
}

// TestStepRefusesABadQuestion: an ask_user call without a question, or a second one in the same
// turn, is an error the model reads; the step asks the person nothing.
func TestStepRefusesABadQuestion(t *testing.T) {
	srv := modeltest.NewServer(t, testKey,
		modeltest.Calls(modeltest.Call("ask_user", `{"question":"  "}`)),
		modeltest.Calls(modeltest.Call("ask_user", `{"question":"First?"}`), modeltest.Call("ask_user", `{"question":"Second?"}`)))
	var n atomic.Int32
	loop := newLoop(t.TempDir(), &n)
	resp, err := loop.Step(t.Context(), stepRequest(srv, agentvm.ProviderOpenAI, 1, nil))
	require.NoError(t, err)
	require.Empty(t, resp.Question)
	require.True(t, resp.ToolCalls[0].IsError)
	require.Contains(t, resp.ToolCalls[0].Result, "question is required")

	resp, err = loop.Step(t.Context(), stepRequest(srv, agentvm.ProviderOpenAI, 2, resp.Messages))
	require.NoError(t, err)
	require.Equal(t, "First?", resp.Question)
	require.True(t, resp.ToolCalls[1].IsError)
	require.Contains(t, resp.ToolCalls[1].Result, "one question a turn")
}

// TestStepShowsThePlan: a gui_plan call is the step's plan, whole, with a result the model reads;
// a bad plan is an error result naming the item, and no plan.
func TestStepShowsThePlan(t *testing.T) {
	srv := modeltest.NewServer(t, testKey,
		modeltest.Calls(modeltest.Call("gui_plan", `{"items":[{"text":"open the site","status":"done"},{"text":"log in","status":"doing"},{"text":"download the report","status":"todo"}]}`)),
		modeltest.Calls(modeltest.Call("gui_plan", `{"items":[{"text":"open the site","status":"maybe"}]}`)))
	var n atomic.Int32
	loop := newLoop(t.TempDir(), &n)
	resp, err := loop.Step(t.Context(), stepRequest(srv, agentvm.ProviderOpenAI, 1, nil))
	require.NoError(t, err)
	require.Len(t, resp.Plan, 3)
	require.Equal(t, "log in", resp.Plan[1].Text)
	require.Equal(t, "doing", resp.Plan[1].Status)
	require.Equal(t, "plan shown: 3 items, 1 done or skipped", resp.ToolCalls[0].Result)

	resp, err = loop.Step(t.Context(), stepRequest(srv, agentvm.ProviderOpenAI, 2, resp.Messages))
	require.NoError(t, err)
	require.Empty(t, resp.Plan)
	require.True(t, resp.ToolCalls[0].IsError)
	require.Contains(t, resp.ToolCalls[0].Result, "items[0].status: must be one of todo, doing, done, skipped")
}

// TestStepFallsBackToTheNextModel: a model still overloaded after the client's retries gives way
// to the run's fallback models in order; the step says which model answered. A failure another
// model would not change (a 400) is the step's error at once.
func TestStepFallsBackToTheNextModel(t *testing.T) {
	srv := modeltest.NewServer(t, testKey,
		modeltest.Turn{Status: 529, Message: "overloaded"},
		modeltest.Turn{Status: 503, Message: "down"},
		modeltest.Reply("Answered by the second fallback."),
		modeltest.Turn{Status: 400, Message: "bad request"})
	var n atomic.Int32
	loop := newLoop(t.TempDir(), &n)
	req := stepRequest(srv, agentvm.ProviderAnthropic, 1, nil)
	req.FallbackModels = []string{"fallback-1", "fallback-2", "fallback-3"}
	resp, err := loop.Step(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, "fallback-2", resp.Model)
	require.Equal(t, "Answered by the second fallback.", resp.Text)
	var models []string
	for _, r := range srv.Requests() {
		models = append(models, r.JSON()["model"].(string))
	}
	require.Equal(t, []string{"test-model", "fallback-1", "fallback-2"}, models)

	_, err = loop.Step(t.Context(), req)
	require.Error(t, err)
	require.Len(t, srv.Requests(), 4, "a 400 is not tried on another model")
}
