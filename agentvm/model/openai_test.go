package model_test

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/loomhand/cocoonbox/agentvm/model"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
)

func TestOpenAISendsConversationInChatShape(t *testing.T) {
	srv := modeltest.NewServer(t, testKey, modeltest.Reply("done"))
	_, err := model.NewOpenAI(srv.OpenAIBaseURL(), testKey, nil).Complete(t.Context(), conversation(), nil)
	require.NoError(t, err)

	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "/v1/chat/completions", reqs[0].Path)
	require.Equal(t, "Bearer "+testKey, reqs[0].Header.Get("Authorization"))

	dataURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)
	want := `{
		"model": "test-model",
		"stream": true,
		"stream_options": {"include_usage": true},
		"max_completion_tokens": 1024,
		"messages": [
			{"role": "system", "content": "You drive a box."},
			{"role": "user", "content": [
				{"type": "text", "text": "What is on screen?"},
				{"type": "image_url", "image_url": {"url": "` + dataURL + `"}}
			]},
			{"role": "assistant", "content": "Checking.", "tool_calls": [
				{"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": "{\"command\":\"ls\"}"}},
				{"id": "call_2", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}
			]},
			{"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"},
			{"role": "tool", "tool_call_id": "call_2", "content": "captured"},
			{"role": "user", "content": [
				{"type": "text", "text": "Images from tool call call_2:"},
				{"type": "image_url", "image_url": {"url": "` + dataURL + `"}}
			]}
		],
		"tools": [
			{"type": "function", "function": {
				"name": "shell",
				"description": "Run a command.",
				"parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
			}}
		]
	}`
	require.JSONEq(t, want, string(reqs[0].Body))
}

func TestOpenAIToolCallRoundTrip(t *testing.T) {
	// The calls the model made go back verbatim in the next request.
	srv := modeltest.NewServer(t, testKey,
		modeltest.Calls(modeltest.Call("shell", `{"command":"uname -a"}`)),
		modeltest.Reply("Linux."))
	p := model.NewOpenAI(srv.OpenAIBaseURL(), testKey, nil)
	req := hello()
	first, err := p.Complete(t.Context(), req, nil)
	require.NoError(t, err)
	require.Len(t, first.ToolCalls, 1)

	req.Messages = append(req.Messages,
		model.Message{Role: model.RoleAssistant, ToolCalls: first.ToolCalls},
		model.Message{Role: model.RoleTool, ToolCallID: first.ToolCalls[0].ID, Text: "Linux box 6.8"})
	second, err := p.Complete(t.Context(), req, nil)
	require.NoError(t, err)
	require.Equal(t, "Linux.", second.Text)

	var body struct {
		Messages []json.RawMessage `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(srv.Requests()[1].Body, &body))
	require.Len(t, body.Messages, 3)
	require.JSONEq(t, `{"role":"assistant","tool_calls":[{"id":"`+first.ToolCalls[0].ID+`","type":"function","function":{"name":"shell","arguments":"{\"command\":\"uname -a\"}"}}]}`, string(body.Messages[1]))
	require.JSONEq(t, `{"role":"tool","tool_call_id":"`+first.ToolCalls[0].ID+`","content":"Linux box 6.8"}`, string(body.Messages[2]))
}
