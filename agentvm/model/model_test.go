package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/loomhand/cocoonbox/agentvm/model"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
)

const testKey = "sk-test-secret-key"

// fast keeps backoff short so retry tests take milliseconds.
var fast = model.WithRetry(model.Retry{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond})

// adapter builds one Provider against a scripted server; every behaviour test runs for both.
type adapter struct {
	name  string
	stop  string // natural stop reason of a text reply
	tools string // stop reason of a tool-call reply
	new   func(s *modeltest.Server, key string, opts ...model.Option) model.Provider
}

var adapters = []adapter{
	{"openai", "stop", "tool_calls", func(s *modeltest.Server, key string, opts ...model.Option) model.Provider {
		return model.NewOpenAI(s.OpenAIBaseURL(), key, nil, opts...)
	}},
	{"anthropic", "end_turn", "tool_use", func(s *modeltest.Server, key string, opts ...model.Option) model.Provider {
		return model.NewAnthropic(s.AnthropicBaseURL(), key, nil, opts...)
	}},
}

func forEach(t *testing.T, test func(t *testing.T, a adapter)) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) { test(t, a) })
	}
}

func hello() model.Request {
	return model.Request{Model: "test-model", Messages: []model.Message{{Role: model.RoleUser, Text: "hi"}}}
}

func TestCompleteStreamsTextDeltas(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter) {
		srv := modeltest.NewServer(t, testKey, modeltest.Reply("Hel", "lo, ", "world"))
		var deltas []string
		resp, err := a.new(srv, testKey).Complete(t.Context(), hello(), func(d string) { deltas = append(deltas, d) })
		require.NoError(t, err)
		require.Equal(t, []string{"Hel", "lo, ", "world"}, deltas)
		require.Equal(t, "Hello, world", resp.Text)
		require.Empty(t, resp.ToolCalls)
		require.Equal(t, a.stop, resp.StopReason)
		require.Equal(t, 10, resp.InputTokens)
		require.Equal(t, 5, resp.OutputTokens)
		require.Len(t, srv.Requests(), 1)
		require.Equal(t, true, srv.Requests()[0].JSON()["stream"])
	})
}

func TestCompleteNilOnText(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter) {
		srv := modeltest.NewServer(t, testKey, modeltest.Reply("a", "b"))
		resp, err := a.new(srv, testKey).Complete(t.Context(), hello(), nil)
		require.NoError(t, err)
		require.Equal(t, "ab", resp.Text)
	})
}

func TestCompleteParsesToolCalls(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter) {
		turn := modeltest.Calls(
			modeltest.Call("shell", `{"command":"ls -la /tmp","timeout_seconds":30}`),
			modeltest.Call("screenshot", `{}`),
		)
		turn.Text = []string{"Let me ", "look."}
		srv := modeltest.NewServer(t, testKey, turn)
		req := hello()
		req.Tools = []model.Tool{
			{Name: "shell", Description: "Run a command.", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"],"additionalProperties":false}`)},
			{Name: "screenshot", Description: "Capture the screen."},
		}
		resp, err := a.new(srv, testKey).Complete(t.Context(), req, nil)
		require.NoError(t, err)
		require.Equal(t, "Let me look.", resp.Text)
		require.Equal(t, a.tools, resp.StopReason)
		require.Len(t, resp.ToolCalls, 2)
		require.Equal(t, "shell", resp.ToolCalls[0].Name)
		require.JSONEq(t, `{"command":"ls -la /tmp","timeout_seconds":30}`, string(resp.ToolCalls[0].Arguments))
		require.NotEmpty(t, resp.ToolCalls[0].ID)
		require.Equal(t, "screenshot", resp.ToolCalls[1].Name)
		require.JSONEq(t, `{}`, string(resp.ToolCalls[1].Arguments))
		require.NotEqual(t, resp.ToolCalls[0].ID, resp.ToolCalls[1].ID)
	})
}

func TestCompleteRetriesServerErrors(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter) {
		srv := modeltest.NewServer(t, testKey,
			modeltest.Fault(http.StatusInternalServerError, "boom"),
			modeltest.Fault(http.StatusInternalServerError, "boom"),
			modeltest.Reply("ok"))
		resp, err := a.new(srv, testKey, fast).Complete(t.Context(), hello(), nil)
		require.NoError(t, err)
		require.Equal(t, "ok", resp.Text)
		require.Len(t, srv.Requests(), 3)
	})
}

func TestCompleteRetriesNonJSONGatewayError(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter) {
		srv := modeltest.NewServer(t, testKey,
			modeltest.Turn{Status: http.StatusBadGateway, Body: "<html>502 Bad Gateway</html>"},
			modeltest.Reply("ok"))
		resp, err := a.new(srv, testKey, fast).Complete(t.Context(), hello(), nil)
		require.NoError(t, err)
		require.Equal(t, "ok", resp.Text)
		require.Len(t, srv.Requests(), 2)
	})
}

func TestCompleteHonorsRetryAfter(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter) {
		srv := modeltest.NewServer(t, testKey,
			modeltest.Fault(http.StatusTooManyRequests, "slow down").WithHeader("Retry-After", "0"),
			modeltest.Reply("ok"))
		// A backoff this long would time the test out: only Retry-After: 0 makes it quick.
		slow := model.WithRetry(model.Retry{BaseDelay: time.Minute, MaxDelay: time.Minute})
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		resp, err := a.new(srv, testKey, slow).Complete(ctx, hello(), nil)
		require.NoError(t, err)
		require.Equal(t, "ok", resp.Text)
		require.Len(t, srv.Requests(), 2)
	})
}

func TestCompleteFailsAtOnceOnBadRequest(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter) {
		srv := modeltest.NewServer(t, testKey,
			modeltest.Turn{Status: http.StatusBadRequest, Body: `{"error":{"message":"bad model"}}`})
		_, err := a.new(srv, testKey, fast).Complete(t.Context(), hello(), nil)
		var e *model.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, http.StatusBadRequest, e.Status)
		require.Equal(t, "bad model", e.Message)
		require.False(t, e.Retryable)
		require.Len(t, srv.Requests(), 1)
	})
}

func TestCompleteReadsProtocolErrorShape(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter) {
		srv := modeltest.NewServer(t, testKey, modeltest.Fault(http.StatusNotFound, "model test-model not found"))
		_, err := a.new(srv, testKey, fast).Complete(t.Context(), hello(), nil)
		var e *model.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, http.StatusNotFound, e.Status)
		require.Equal(t, "model test-model not found", e.Message)
	})
}

func TestCompleteGivesUpAfterAttempts(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter) {
		srv := modeltest.NewServer(t, testKey)
		for range 4 {
			srv.Script(modeltest.Fault(http.StatusServiceUnavailable, "down"))
		}
		_, err := a.new(srv, testKey, fast).Complete(t.Context(), hello(), nil)
		var e *model.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, http.StatusServiceUnavailable, e.Status)
		require.True(t, e.Retryable)
		require.Len(t, srv.Requests(), 4)
	})
}

func TestCompleteCancelStopsRetryWait(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter) {
		srv := modeltest.NewServer(t, testKey,
			modeltest.Fault(http.StatusServiceUnavailable, "down").WithHeader("Retry-After", "60"),
			modeltest.Reply("never"))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := a.new(srv, testKey).Complete(ctx, hello(), nil)
			done <- err
		}()
		require.Eventually(t, func() bool { return len(srv.Requests()) == 1 }, 10*time.Second, 5*time.Millisecond)
		cancel()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Fatal("Complete still waiting after cancel")
		}
		require.Len(t, srv.Requests(), 1)
		require.Equal(t, 1, srv.Remaining())
	})
}

func TestCompleteWrongKeyIsNotRetried(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter) {
		srv := modeltest.NewServer(t, testKey, modeltest.Reply("never"))
		_, err := a.new(srv, "sk-wrong", fast).Complete(t.Context(), hello(), nil)
		var e *model.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, http.StatusUnauthorized, e.Status)
		require.False(t, e.Retryable)
		require.Len(t, srv.Requests(), 1)
	})
}

func TestErrorNeverCarriesAPIKey(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter) {
		// A careless gateway echoing the key back must not put it into our error.
		srv := modeltest.NewServer(t, testKey,
			modeltest.Turn{Status: http.StatusForbidden, Body: `{"error":{"message":"key ` + testKey + ` may not use this model"}}`})
		_, err := a.new(srv, testKey, fast).Complete(t.Context(), hello(), nil)
		require.Error(t, err)
		require.NotContains(t, err.Error(), testKey)
		require.Contains(t, err.Error(), "[redacted] may not use this model")
	})
}

func TestCompleteRejectsUnknownRole(t *testing.T) {
	forEach(t, func(t *testing.T, a adapter) {
		srv := modeltest.NewServer(t, testKey)
		req := model.Request{Model: "m", Messages: []model.Message{{Role: "system", Text: "x"}}}
		_, err := a.new(srv, testKey).Complete(t.Context(), req, nil)
		require.ErrorContains(t, err, `role "system"`)
		require.Empty(t, srv.Requests())
		var e *model.Error
		require.False(t, errors.As(err, &e))
	})
}

// conversation is a tool round trip with a screenshot, as the agent will send it.
func conversation() model.Request {
	return model.Request{
		Model:     "test-model",
		System:    "You drive a box.",
		MaxTokens: 1024,
		Messages: []model.Message{
			{Role: model.RoleUser, Text: "What is on screen?", Images: [][]byte{png}},
			{Role: model.RoleAssistant, Text: "Checking.", ToolCalls: []model.ToolCall{
				{ID: "call_1", Name: "shell", Arguments: json.RawMessage(`{"command":"ls"}`)},
				{ID: "call_2", Name: "screenshot", Arguments: json.RawMessage(`{}`)},
			}},
			{Role: model.RoleTool, ToolCallID: "call_1", Text: "a.txt\nb.txt"},
			{Role: model.RoleTool, ToolCallID: "call_2", Text: "captured", Images: [][]byte{png}},
		},
		Tools: []model.Tool{{Name: "shell", Description: "Run a command.", Parameters: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)}},
	}
}

// png is the smallest PNG signature and header, enough for content sniffing.
var png = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89")
