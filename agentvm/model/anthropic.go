package model

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

var _ Provider = (*anthropicProvider)(nil)

// anthropicProvider speaks the Anthropic messages protocol.
type anthropicProvider struct {
	messages anthropic.MessageService
	apiKey   string
	retry    Retry
}

// NewAnthropic returns a Provider for an Anthropic-compatible messages endpoint. baseURL is the
// API root without its version, as ANTHROPIC_BASE_URL would be ("https://api.anthropic.com");
// the key is sent as x-api-key, the header every Anthropic-compatible gateway accepts (the SDK
// alone would send it as a bearer token); an empty key sends none (a proxy on the way adds it).
// A nil hc uses a client without a total timeout.
func NewAnthropic(baseURL, apiKey string, hc *http.Client, opts ...Option) Provider {
	o := buildOptions(opts)
	// Built from explicit options only: no ANTHROPIC_* variable or credentials profile of the
	// agent's environment takes part.
	ropts := []option.RequestOption{
		option.WithBaseURL(baseURL),
		option.WithHTTPClient(httpClient(hc)),
		option.WithMaxRetries(0),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(req)
			return checkResponse(req.Context(), apiKey, resp, err)
		}),
	}
	if apiKey != "" {
		ropts = append(ropts, option.WithHeader("X-Api-Key", apiKey))
	}
	messages := anthropic.NewMessageService(ropts...)
	return &anthropicProvider{messages: messages, apiKey: apiKey, retry: o.retry}
}

func (p *anthropicProvider) Complete(ctx context.Context, req Request, onText func(string)) (Response, error) {
	params, err := anthropicParams(req)
	if err != nil {
		return Response{}, fmt.Errorf("anthropic messages: %w", err)
	}
	resp, err := p.retry.run(ctx, onText, func(ctx context.Context, emit func(string)) (Response, error) {
		return p.stream(ctx, params, emit)
	})
	if err != nil {
		return Response{}, fmt.Errorf("anthropic messages: %w", err)
	}
	return resp, nil
}

// stream makes one streamed request and assembles its events.
func (p *anthropicProvider) stream(ctx context.Context, params anthropic.MessageNewParams, emit func(string)) (Response, error) {
	s := p.messages.NewStreaming(ctx, params)
	defer s.Close()

	var (
		msg     anthropic.Message
		stopped bool
	)
	for s.Next() {
		ev := s.Current()
		if err := msg.Accumulate(ev); err != nil {
			return Response{}, &Error{Message: "accumulate stream: " + err.Error(), Retryable: true}
		}
		switch ev.Type {
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" {
				emit(ev.Delta.Text)
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := s.Err(); err != nil {
		return Response{}, streamError(ctx, p.apiKey, anthropicStreamError(err))
	}
	if !stopped {
		return Response{}, &Error{Message: "stream ended without message_stop", Retryable: true}
	}

	resp := Response{
		StopReason:   string(msg.StopReason),
		InputTokens:  int(msg.Usage.InputTokens),
		OutputTokens: int(msg.Usage.OutputTokens),
	}
	var text strings.Builder
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			args := append(json.RawMessage(nil), b.Input...)
			if len(args) == 0 {
				args = json.RawMessage("{}")
			}
			resp.ToolCalls = append(resp.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		}
	}
	resp.Text = text.String()
	return resp, nil
}

// anthropicStreamError turns an error event inside a 200 stream (overloaded_error, api_error,
// ...) into *Error; HTTP errors never get here, checkResponse took them.
func anthropicStreamError(err error) error {
	var ae *anthropic.Error
	if !errors.As(err, &ae) {
		return err
	}
	msg := ae.Message
	if msg == "" {
		msg = string(ae.Type())
	}
	if msg == "" {
		msg = "error event"
	}
	switch ae.Type() {
	case anthropic.ErrorTypeInvalidRequestError, anthropic.ErrorTypeAuthenticationError,
		anthropic.ErrorTypePermissionError, anthropic.ErrorTypeNotFoundError, anthropic.ErrorTypeBillingError:
		return &Error{Message: "stream: " + msg}
	}
	return &Error{Message: "stream: " + msg, Retryable: true}
}

func anthropicParams(req Request) (anthropic.MessageNewParams, error) {
	params := anthropic.MessageNewParams{
		Model:     req.Model,
		MaxTokens: int64(req.MaxTokens),
	}
	if params.MaxTokens <= 0 {
		params.MaxTokens = DefaultMaxTokens
	}
	if req.System != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	msgs, err := anthropicMessages(req.Messages)
	if err != nil {
		return params, err
	}
	params.Messages = msgs
	for _, t := range req.Tools {
		schema, err := inputSchema(t.Parameters)
		if err != nil {
			return params, fmt.Errorf("tool %s parameters: %w", t.Name, err)
		}
		tool := anthropic.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tool.Description = anthropic.String(t.Description)
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return params, nil
}

// anthropicMessages maps the conversation. Tool results are blocks of a user turn, and the
// results of one assistant turn's calls must all sit in the next user turn, so consecutive tool
// and user messages merge into one user turn, tool results first.
func anthropicMessages(msgs []Message) ([]anthropic.MessageParam, error) {
	var out []anthropic.MessageParam
	lastIsUser := func() bool { return len(out) > 0 && out[len(out)-1].OfUser != nil }
	for _, m := range msgs {
		switch m.Role {
		case RoleUser:
			blocks := userBlocks(m.Text, m.Images)
			if lastIsUser() {
				u := out[len(out)-1].OfUser
				u.Content = append(u.Content, blocks...)
				continue
			}
			out = append(out, anthropic.NewUserMessage(blocks...))
		case RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if m.Text != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Text))
			}
			for _, c := range m.ToolCalls {
				input := c.Arguments
				if !json.Valid(input) {
					input = json.RawMessage("{}")
				}
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, input, c.Name))
			}
			out = append(out, anthropic.NewAssistantMessage(blocks...))
		case RoleTool:
			result := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			if m.Text != "" {
				result.Content = append(result.Content, anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: m.Text}})
			}
			for _, img := range m.Images {
				result.Content = append(result.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: imageBlock(img)})
			}
			block := anthropic.ContentBlockParamUnion{OfToolResult: &result}
			if lastIsUser() {
				u := out[len(out)-1].OfUser
				u.Content = append(u.Content, block)
				continue
			}
			out = append(out, anthropic.NewUserMessage(block))
		default:
			return nil, fmt.Errorf("message role %q unknown", m.Role)
		}
	}
	return out, nil
}

func userBlocks(text string, images [][]byte) []anthropic.ContentBlockParamUnion {
	var blocks []anthropic.ContentBlockParamUnion
	// The API rejects empty text blocks; an empty text is only sent when it is all there is.
	if text != "" || len(images) == 0 {
		blocks = append(blocks, anthropic.NewTextBlock(text))
	}
	for _, img := range images {
		blocks = append(blocks, anthropic.ContentBlockParamUnion{OfImage: imageBlock(img)})
	}
	return blocks
}

func imageBlock(img []byte) *anthropic.ImageBlockParam {
	return &anthropic.ImageBlockParam{Source: anthropic.ImageBlockParamSourceUnion{
		OfBase64: &anthropic.Base64ImageSourceParam{
			Data:      base64.StdEncoding.EncodeToString(img),
			MediaType: anthropic.Base64ImageSourceMediaType(mediaType(img)),
		},
	}}
}

// inputSchema splits a JSON schema into the SDK's properties, required and extra fields.
func inputSchema(raw json.RawMessage) (anthropic.ToolInputSchemaParam, error) {
	var schema anthropic.ToolInputSchemaParam
	if len(raw) == 0 {
		return schema, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return schema, err
	}
	for k, v := range fields {
		switch k {
		case "type":
		case "properties":
			schema.Properties = v
		case "required":
			if err := json.Unmarshal(v, &schema.Required); err != nil {
				return schema, fmt.Errorf("required: %w", err)
			}
		default:
			if schema.ExtraFields == nil {
				schema.ExtraFields = map[string]any{}
			}
			schema.ExtraFields[k] = v
		}
	}
	return schema, nil
}
