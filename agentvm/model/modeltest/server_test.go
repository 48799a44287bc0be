package modeltest_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
)

const key = "sk-modeltest"

func post(t *testing.T, url string, header http.Header, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header = header
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// events splits an SSE body into (event name, data) pairs.
func events(t *testing.T, r io.Reader) [][2]string {
	t.Helper()
	var out [][2]string
	var name string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			out = append(out, [2]string{name, strings.TrimPrefix(line, "data: ")})
		case line == "":
			name = ""
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func TestChatCompletionsStreamFraming(t *testing.T) {
	srv := modeltest.NewServer(t, key, modeltest.Turn{Text: []string{"Hi", "!"}, ToolCalls: []modeltest.ToolCall{modeltest.Call("shell", `{"command":"ls -la"}`)}})
	resp := post(t, srv.OpenAIBaseURL()+"/chat/completions", http.Header{"Authorization": {"Bearer " + key}},
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/event-stream")

	evs := events(t, resp.Body)
	require.Equal(t, [2]string{"", "[DONE]"}, evs[len(evs)-1])
	var content, args strings.Builder
	var finish []string
	var usage map[string]any
	for _, ev := range evs[:len(evs)-1] {
		require.Empty(t, ev[0], "chat completions sends bare data lines")
		var c struct {
			Object  string         `json:"object"`
			Usage   map[string]any `json:"usage"`
			Choices []struct {
				Delta struct {
					Content   string `json:"content"`
					ToolCalls []struct {
						Index    int    `json:"index"`
						ID       string `json:"id"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(ev[1]), &c))
		require.Equal(t, "chat.completion.chunk", c.Object)
		if c.Usage != nil {
			usage = c.Usage
		}
		for _, ch := range c.Choices {
			content.WriteString(ch.Delta.Content)
			for _, tc := range ch.Delta.ToolCalls {
				require.Equal(t, 0, tc.Index)
				if tc.ID != "" {
					require.True(t, strings.HasPrefix(tc.ID, "call_"))
					require.Equal(t, "shell", tc.Function.Name)
				}
				args.WriteString(tc.Function.Arguments)
			}
			if ch.FinishReason != nil {
				finish = append(finish, *ch.FinishReason)
			}
		}
	}
	require.Equal(t, "Hi!", content.String())
	require.Equal(t, `{"command":"ls -la"}`, args.String())
	require.Equal(t, []string{"tool_calls"}, finish)
	require.Equal(t, float64(15), usage["total_tokens"])
}

func TestMessagesStreamEvents(t *testing.T) {
	srv := modeltest.NewServer(t, key, modeltest.Turn{Text: []string{"Hi"}, ToolCalls: []modeltest.ToolCall{modeltest.Call("shell", `{"command":"ls"}`)}})
	resp := post(t, srv.AnthropicBaseURL()+"/v1/messages", http.Header{"X-Api-Key": {key}, "Anthropic-Version": {"2023-06-01"}},
		`{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	var names []string
	for _, ev := range events(t, resp.Body) {
		var data struct {
			Type string `json:"type"`
		}
		require.NoError(t, json.Unmarshal([]byte(ev[1]), &data))
		require.Equal(t, ev[0], data.Type, "event name matches data type")
		names = append(names, ev[0])
	}
	require.Equal(t, []string{
		"message_start",
		"content_block_start", "ping", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop",
	}, names)
}

func TestNonStreamingRepliesParseWithSDKs(t *testing.T) {
	srv := modeltest.NewServer(t, key,
		modeltest.Calls(modeltest.Call("shell", `{"command":"ls"}`)),
		modeltest.Reply("Hello", " there"))

	chat := openai.NewChatCompletionService(ooption.WithBaseURL(srv.OpenAIBaseURL()), ooption.WithAPIKey(key), ooption.WithMaxRetries(0))
	c, err := chat.New(t.Context(), openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	require.NoError(t, err)
	require.Equal(t, "tool_calls", c.Choices[0].FinishReason)
	require.Equal(t, "shell", c.Choices[0].Message.ToolCalls[0].Function.Name)
	require.JSONEq(t, `{"command":"ls"}`, c.Choices[0].Message.ToolCalls[0].Function.Arguments)
	require.Equal(t, int64(15), c.Usage.TotalTokens)

	msgs := anthropic.NewMessageService(aoption.WithBaseURL(srv.AnthropicBaseURL()), aoption.WithHeader("X-Api-Key", key), aoption.WithMaxRetries(0))
	m, err := msgs.New(t.Context(), anthropic.MessageNewParams{Model: "m", MaxTokens: 10, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	require.NoError(t, err)
	require.Equal(t, anthropic.StopReasonEndTurn, m.StopReason)
	require.Equal(t, "Hello there", m.Content[0].Text)
	require.Equal(t, int64(10), m.Usage.InputTokens)
}

func TestFaultsAndAuth(t *testing.T) {
	srv := modeltest.NewServer(t, key,
		modeltest.Fault(http.StatusTooManyRequests, "slow down").WithHeader("Retry-After", "3"),
		modeltest.Fault(529, "overloaded"))

	// A wrong key is refused before the script is consulted.
	resp := post(t, srv.OpenAIBaseURL()+"/chat/completions", http.Header{"Authorization": {"Bearer nope"}}, `{"model":"m","messages":[]}`)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, 2, srv.Remaining())

	resp = post(t, srv.OpenAIBaseURL()+"/chat/completions", http.Header{"Authorization": {"Bearer " + key}}, `{"model":"m","messages":[]}`)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "3", resp.Header.Get("Retry-After"))
	body, _ := io.ReadAll(resp.Body)
	require.JSONEq(t, `{"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, string(body))

	// Without anthropic-version the API refuses the request whatever the key.
	resp = post(t, srv.AnthropicBaseURL()+"/v1/messages", http.Header{"X-Api-Key": {key}}, `{}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, 1, srv.Remaining())

	resp = post(t, srv.AnthropicBaseURL()+"/v1/messages", http.Header{"X-Api-Key": {key}, "Anthropic-Version": {"2023-06-01"}}, `{"model":"m"}`)
	require.Equal(t, 529, resp.StatusCode)
	body, _ = io.ReadAll(resp.Body)
	require.JSONEq(t, `{"type":"error","error":{"type":"overloaded_error","message":"overloaded"},"request_id":"req_modeltest"}`, string(body))

	reqs := srv.Requests()
	require.Len(t, reqs, 4)
	require.Equal(t, "/v1/chat/completions", reqs[0].Path)
	require.Equal(t, "/v1/messages", reqs[3].Path)
	require.Equal(t, "m", reqs[3].JSON()["model"])
}
