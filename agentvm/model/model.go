// Package model is the agent's one view of a language model: a small Provider interface and
// adapters for the two wire protocols that gateways speak (OpenAI chat completions and Anthropic
// messages), so the tool loop never depends on which model or gateway sits behind a box's key.
package model

import (
	"context"
	"encoding/json"
	"net/http"
)

// Roles of a Message.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one turn of the conversation sent to the model.
type Message struct {
	Role       string     // RoleUser, RoleAssistant or RoleTool
	Text       string     // the text of the turn; for RoleTool, the tool's result
	ToolCalls  []ToolCall // for RoleAssistant: the calls the model made in that turn
	ToolCallID string     // for RoleTool: the ToolCall.ID this result answers
	Images     [][]byte   // PNG (or JPEG, GIF, WebP) images, e.g. screenshots, for RoleUser or RoleTool
}

// ToolCall is one call of a tool the model asked for.
type ToolCall struct {
	ID        string
	Name      string
	Arguments json.RawMessage // the arguments as the model wrote them; not guaranteed to be valid JSON
}

// Tool describes a tool the model may call.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage // JSON schema of the arguments object
}

// Request is one completion request.
type Request struct {
	Model     string
	System    string
	Messages  []Message
	Tools     []Tool
	MaxTokens int // 0 leaves the limit to the provider (Anthropic, which requires one, gets DefaultMaxTokens)
}

// Response is the model's whole reply to one Request.
type Response struct {
	Text                      string
	ToolCalls                 []ToolCall
	StopReason                string // as the provider reported it: "stop", "tool_calls", "length" or "end_turn", "tool_use", "max_tokens", ...
	InputTokens, OutputTokens int
}

// Provider completes a conversation. Complete streams: onText, when not nil, receives the reply's
// text deltas in order as they arrive, and the returned Response holds the whole reply.
// Failures are *Error, or the context's error once ctx is done.
type Provider interface {
	Complete(ctx context.Context, req Request, onText func(delta string)) (Response, error)
}

// DefaultMaxTokens is the output limit sent to Anthropic when Request.MaxTokens is 0.
const DefaultMaxTokens = 8192

// Option configures an adapter.
type Option func(*options)

type options struct {
	retry Retry
}

// WithRetry replaces DefaultRetry; zero fields keep their defaults.
func WithRetry(r Retry) Option {
	return func(o *options) { o.retry = r.withDefaults() }
}

func buildOptions(opts []Option) options {
	o := options{retry: DefaultRetry}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// httpClient returns hc, or a client without a total timeout (a streamed reply may take
// minutes; the caller's ctx bounds it) when hc is nil.
func httpClient(hc *http.Client) *http.Client {
	if hc != nil {
		return hc
	}
	return &http.Client{}
}

// mediaType names an image's format for the data URL / base64 source, defaulting to PNG.
func mediaType(img []byte) string {
	switch ct := http.DetectContentType(img); ct {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return ct
	}
	return "image/png"
}
