package model_test

import (
	"encoding/base64"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/loomhand/cocoonbox/agentvm/model"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
)

// TestResponsesSendsConversationAsItems: the conversation goes to POST /responses as input
// items (messages, function calls and their outputs, tool images in a user message after them),
// the system prompt as instructions, nothing stored on the provider's side.
func TestResponsesSendsConversationAsItems(t *testing.T) {
	srv := modeltest.NewServer(t, testKey, modeltest.Reply("done"))
	_, err := model.NewOpenAIResponses(srv.OpenAIBaseURL(), testKey, nil).Complete(t.Context(), conversation(), nil)
	require.NoError(t, err)

	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "/v1/responses", reqs[0].Path)
	require.Equal(t, "Bearer "+testKey, reqs[0].Header.Get("Authorization"))

	dataURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)
	want := `{
		"model": "test-model",
		"stream": true,
		"store": false,
		"instructions": "You drive a box.",
		"max_output_tokens": 1024,
		"input": [
			{"role": "user", "content": [
				{"type": "input_text", "text": "What is on screen?"},
				{"type": "input_image", "image_url": "` + dataURL + `", "detail": "auto"}
			]},
			{"role": "assistant", "content": "Checking."},
			{"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"command\":\"ls\"}"},
			{"type": "function_call", "call_id": "call_2", "name": "screenshot", "arguments": "{}"},
			{"type": "function_call_output", "call_id": "call_1", "output": "a.txt\nb.txt"},
			{"type": "function_call_output", "call_id": "call_2", "output": "captured"},
			{"role": "user", "content": [
				{"type": "input_text", "text": "Images from tool call call_2:"},
				{"type": "input_image", "image_url": "` + dataURL + `", "detail": "auto"}
			]}
		],
		"tools": [
			{"type": "function", "name": "shell", "description": "Run a command.", "strict": false,
			 "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
		]
	}`
	require.JSONEq(t, want, string(reqs[0].Body))
}

// TestResponsesStream: text arrives as deltas, function calls whole, and the usage from
// response.completed; a 500 is retried like any gateway failure.
func TestResponsesStream(t *testing.T) {
	srv := modeltest.NewServer(t, testKey,
		modeltest.Fault(http.StatusInternalServerError, "busy"),
		modeltest.Turn{Text: []string{"Let me ", "look."}, ToolCalls: []modeltest.ToolCall{{ID: "call_9", Name: "shell", Arguments: `{"command":"uname -a"}`}},
			InputTokens: 321, OutputTokens: 12})
	var deltas []string
	resp, err := model.NewOpenAIResponses(srv.OpenAIBaseURL(), testKey, nil, fast).
		Complete(t.Context(), hello(), func(d string) { deltas = append(deltas, d) })
	require.NoError(t, err)
	require.Equal(t, "Let me look.", resp.Text)
	require.Equal(t, []string{"Let me ", "look."}, deltas)
	require.Equal(t, []model.ToolCall{{ID: "call_9", Name: "shell", Arguments: []byte(`{"command":"uname -a"}`)}}, resp.ToolCalls)
	require.Equal(t, 321, resp.InputTokens)
	require.Equal(t, 12, resp.OutputTokens)
	require.Equal(t, "completed", resp.StopReason)
	require.Len(t, srv.Requests(), 2)
}
