package model_test

import (
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/loomhand/cocoonbox/agentvm/model"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
)

func TestAnthropicSendsConversationInMessagesShape(t *testing.T) {
	srv := modeltest.NewServer(t, testKey, modeltest.Reply("done"))
	_, err := model.NewAnthropic(srv.AnthropicBaseURL(), testKey, nil).Complete(t.Context(), conversation(), nil)
	require.NoError(t, err)

	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "/v1/messages", reqs[0].Path)
	require.Equal(t, testKey, reqs[0].Header.Get("X-Api-Key"))
	require.Empty(t, reqs[0].Header.Get("Authorization"))
	require.NotEmpty(t, reqs[0].Header.Get("Anthropic-Version"))

	image := `{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "` + base64.StdEncoding.EncodeToString(png) + `"}}`
	want := `{
		"model": "test-model",
		"stream": true,
		"max_tokens": 1024,
		"system": [{"type": "text", "text": "You drive a box."}],
		"messages": [
			{"role": "user", "content": [
				{"type": "text", "text": "What is on screen?"},
				` + image + `
			]},
			{"role": "assistant", "content": [
				{"type": "text", "text": "Checking."},
				{"type": "tool_use", "id": "call_1", "name": "shell", "input": {"command": "ls"}},
				{"type": "tool_use", "id": "call_2", "name": "screenshot", "input": {}}
			]},
			{"role": "user", "content": [
				{"type": "tool_result", "tool_use_id": "call_1", "content": [{"type": "text", "text": "a.txt\nb.txt"}]},
				{"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "captured"}, ` + image + `]}
			]}
		],
		"tools": [
			{"name": "shell", "description": "Run a command.",
			 "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
		]
	}`
	require.JSONEq(t, want, string(reqs[0].Body))
}

func TestAnthropicDefaultsMaxTokensAndKeepsSchemaExtras(t *testing.T) {
	srv := modeltest.NewServer(t, testKey, modeltest.Reply("ok"))
	req := hello()
	req.Tools = []model.Tool{{Name: "type_text", Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"additionalProperties":false}`)}}
	_, err := model.NewAnthropic(srv.AnthropicBaseURL(), testKey, nil).Complete(t.Context(), req, nil)
	require.NoError(t, err)

	var body struct {
		MaxTokens int               `json:"max_tokens"`
		Tools     []json.RawMessage `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(srv.Requests()[0].Body, &body))
	require.Equal(t, model.DefaultMaxTokens, body.MaxTokens)
	require.JSONEq(t, `{"name":"type_text","input_schema":{"type":"object","properties":{"text":{"type":"string"}},"additionalProperties":false}}`, string(body.Tools[0]))
}

func TestAnthropicToolCallRoundTrip(t *testing.T) {
	srv := modeltest.NewServer(t, testKey,
		modeltest.Calls(modeltest.Call("shell", `{"command":"uname -a"}`)),
		modeltest.Reply("Linux."))
	p := model.NewAnthropic(srv.AnthropicBaseURL(), testKey, nil)
	req := hello()
	first, err := p.Complete(t.Context(), req, nil)
	require.NoError(t, err)
	require.Len(t, first.ToolCalls, 1)
	require.Regexp(t, `^toolu_`, first.ToolCalls[0].ID)

	req.Messages = append(req.Messages,
		model.Message{Role: model.RoleAssistant, ToolCalls: first.ToolCalls},
		model.Message{Role: model.RoleTool, ToolCallID: first.ToolCalls[0].ID, Text: "Linux box 6.8"})
	_, err = p.Complete(t.Context(), req, nil)
	require.NoError(t, err)

	var body struct {
		Messages []json.RawMessage `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(srv.Requests()[1].Body, &body))
	require.Len(t, body.Messages, 3)
	id := first.ToolCalls[0].ID
	require.JSONEq(t, `{"role":"assistant","content":[{"type":"tool_use","id":"`+id+`","name":"shell","input":{"command":"uname -a"}}]}`, string(body.Messages[1]))
	require.JSONEq(t, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"`+id+`","content":[{"type":"text","text":"Linux box 6.8"}]}]}`, string(body.Messages[2]))
}
