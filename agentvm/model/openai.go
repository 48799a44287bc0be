package model

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

var _ Provider = (*openAI)(nil)

// openAI speaks the chat-completions protocol, which most gateways and local servers accept.
type openAI struct {
	chat   openai.ChatCompletionService
	apiKey string
	retry  Retry
}

// NewOpenAI returns a Provider for an OpenAI-compatible chat-completions endpoint. baseURL is
// the API root including its version, as OPENAI_BASE_URL would be ("https://api.openai.com/v1");
// the key is sent as a bearer token; an empty key sends none (a proxy on the way adds it). A nil
// hc uses a client without a total timeout.
func NewOpenAI(baseURL, apiKey string, hc *http.Client, opts ...Option) Provider {
	o := buildOptions(opts)
	chat := openai.NewChatCompletionService(openAIOptions(baseURL, apiKey, hc)...)
	return &openAI{chat: chat, apiKey: apiKey, retry: o.retry}
}

// openAIOptions are the SDK options of both OpenAI protocols. The services are built from
// explicit options only, so no OPENAI_* variable of the agent's environment leaks into
// requests; the SDK never retries (Retry does) and every answer is checked by checkResponse.
func openAIOptions(baseURL, apiKey string, hc *http.Client) []option.RequestOption {
	return []option.RequestOption{
		option.WithBaseURL(baseURL),
		option.WithAPIKey(apiKey),
		option.WithHTTPClient(httpClient(hc)),
		option.WithMaxRetries(0),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(req)
			return checkResponse(req.Context(), apiKey, resp, err)
		}),
	}
}

// dataURL is an image as a data URL, the form both OpenAI protocols take images in.
func dataURL(img []byte) string {
	return "data:" + mediaType(img) + ";base64," + base64.StdEncoding.EncodeToString(img)
}

func (p *openAI) Complete(ctx context.Context, req Request, onText func(string)) (Response, error) {
	params, err := openAIParams(req)
	if err != nil {
		return Response{}, fmt.Errorf("openai chat completion: %w", err)
	}
	resp, err := p.retry.run(ctx, onText, func(ctx context.Context, emit func(string)) (Response, error) {
		return p.stream(ctx, params, emit)
	})
	if err != nil {
		return Response{}, fmt.Errorf("openai chat completion: %w", err)
	}
	return resp, nil
}

// stream makes one streamed request and assembles its chunks.
func (p *openAI) stream(ctx context.Context, params openai.ChatCompletionNewParams, emit func(string)) (Response, error) {
	s := p.chat.NewStreaming(ctx, params)
	defer s.Close()

	var (
		resp     Response
		text     strings.Builder
		calls    []ToolCall
		args     []strings.Builder
		finished bool
	)
	for s.Next() {
		chunk := s.Current()
		if chunk.JSON.Usage.Valid() {
			resp.InputTokens = int(chunk.Usage.PromptTokens)
			resp.OutputTokens = int(chunk.Usage.CompletionTokens)
		}
		for _, choice := range chunk.Choices {
			if choice.Index != 0 {
				continue
			}
			if d := choice.Delta.Content; d != "" {
				text.WriteString(d)
				emit(d)
			}
			// Tool calls arrive as fragments keyed by index: the first carries id and name,
			// the rest pieces of the arguments.
			for _, tc := range choice.Delta.ToolCalls {
				i := int(tc.Index)
				if i < 0 || i > 1024 { // a bogus index must not size a huge slice
					return Response{}, &Error{Message: fmt.Sprintf("tool call index %d out of range", tc.Index)}
				}
				for len(calls) <= i {
					calls = append(calls, ToolCall{})
					args = append(args, strings.Builder{})
				}
				if tc.ID != "" {
					calls[i].ID = tc.ID
				}
				if tc.Function.Name != "" {
					calls[i].Name = tc.Function.Name
				}
				args[i].WriteString(tc.Function.Arguments)
			}
			if choice.FinishReason != "" {
				resp.StopReason = choice.FinishReason
				finished = true
			}
		}
	}
	if err := s.Err(); err != nil {
		return Response{}, streamError(ctx, p.apiKey, err)
	}
	if !finished {
		return Response{}, &Error{Message: "stream ended without a finish_reason", Retryable: true}
	}
	resp.Text = text.String()
	for i, c := range calls {
		if c.Name == "" {
			continue // a gap in the indexes, not a call
		}
		c.Arguments = json.RawMessage(args[i].String())
		if len(c.Arguments) == 0 {
			c.Arguments = json.RawMessage("{}")
		}
		resp.ToolCalls = append(resp.ToolCalls, c)
	}
	return resp, nil
}

func openAIParams(req Request) (openai.ChatCompletionNewParams, error) {
	params := openai.ChatCompletionNewParams{
		Model:         shared.ChatModel(req.Model),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if req.MaxTokens > 0 {
		params.MaxCompletionTokens = openai.Int(int64(req.MaxTokens))
	}
	if req.System != "" {
		params.Messages = append(params.Messages, openai.SystemMessage(req.System))
	}
	msgs, err := openAIMessages(req.Messages)
	if err != nil {
		return params, err
	}
	params.Messages = append(params.Messages, msgs...)
	for _, t := range req.Tools {
		fn := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		if len(t.Parameters) > 0 {
			if err := json.Unmarshal(t.Parameters, &fn.Parameters); err != nil {
				return params, fmt.Errorf("tool %s parameters: %w", t.Name, err)
			}
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	return params, nil
}

// openAIMessages maps the conversation. Tool messages carry text only in this protocol and must
// directly follow the assistant's calls, so images from tool results go in one user message
// after each run of tool messages.
func openAIMessages(msgs []Message) ([]openai.ChatCompletionMessageParamUnion, error) {
	var (
		out     []openai.ChatCompletionMessageParamUnion
		pending []openai.ChatCompletionContentPartUnionParam
	)
	flush := func() {
		if len(pending) > 0 {
			out = append(out, openai.UserMessage(pending))
			pending = nil
		}
	}
	for _, m := range msgs {
		if m.Role != RoleTool {
			flush()
		}
		switch m.Role {
		case RoleUser:
			if len(m.Images) == 0 {
				out = append(out, openai.UserMessage(m.Text))
				continue
			}
			var parts []openai.ChatCompletionContentPartUnionParam
			if m.Text != "" {
				parts = append(parts, openai.TextContentPart(m.Text))
			}
			parts = append(parts, imageParts(m.Images)...)
			out = append(out, openai.UserMessage(parts))
		case RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			if m.Text != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Text)
			}
			for _, c := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      c.Name,
							Arguments: string(c.Arguments),
						},
					},
				})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case RoleTool:
			out = append(out, openai.ToolMessage(m.Text, m.ToolCallID))
			if len(m.Images) > 0 {
				pending = append(pending, openai.TextContentPart(fmt.Sprintf("Images from tool call %s:", m.ToolCallID)))
				pending = append(pending, imageParts(m.Images)...)
			}
		default:
			return nil, fmt.Errorf("message role %q unknown", m.Role)
		}
	}
	flush()
	return out, nil
}

func imageParts(images [][]byte) []openai.ChatCompletionContentPartUnionParam {
	parts := make([]openai.ChatCompletionContentPartUnionParam, 0, len(images))
	for _, img := range images {
		parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: dataURL(img)}))
	}
	return parts
}
