// Package modeltest is a scripted model server for tests: it speaks the OpenAI chat-completions,
// OpenAI responses and Anthropic messages wire formats (streamed and not), answers from a script of turns
// including faults, and records every request so tests can assert what the agent sent.
package modeltest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Turn is one scripted answer: text, tool calls (or both), or a fault.
type Turn struct {
	Text      []string // text deltas, streamed one per chunk or event
	ToolCalls []ToolCall

	Status  int         // non-zero: answer with this HTTP status instead of a reply
	Message string      // the fault's message, in the protocol's error body
	Body    string      // a raw fault body, sent instead of the protocol's error body
	Header  http.Header // extra response headers, e.g. Retry-After

	// Pace is the wait before each text delta of a streamed answer, as a model that thinks
	// aloud slowly; 0 sends them at once.
	Pace time.Duration

	StopReason   string // overrides the protocol's natural stop/finish reason
	InputTokens  int    // reported usage; defaults 10 and 5
	OutputTokens int

	// Answer, when set, makes the turn served from the request's body, as a model that looks
	// at what it was sent (the screenshot it asked for); the rest of this Turn is unused.
	Answer func(body []byte) Turn
}

// ToolCall is a scripted tool call; ID defaults to a protocol-shaped one.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON object
}

// Reply is a text turn streamed in the given deltas.
func Reply(deltas ...string) Turn { return Turn{Text: deltas} }

// Calls is a turn of tool calls.
func Calls(calls ...ToolCall) Turn { return Turn{ToolCalls: calls} }

// Call is one tool call with a generated ID.
func Call(name, args string) ToolCall { return ToolCall{Name: name, Arguments: args} }

// Fault is a turn failing with status and message, in the protocol's error shape.
func Fault(status int, message string) Turn { return Turn{Status: status, Message: message} }

// WithHeader returns t with a response header added.
func (t Turn) WithHeader(key, value string) Turn {
	h := t.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Add(key, value)
	t.Header = h
	return t
}

// Request is one request the server received.
type Request struct {
	Path   string
	Header http.Header
	Body   []byte
	// At is when the whole body had arrived: the gap between two requests of a tool loop is
	// everything but the model's own time.
	At time.Time
}

// JSON decodes the body into a generic value, for assertions on its shape.
func (r Request) JSON() map[string]any {
	var v map[string]any
	_ = json.Unmarshal(r.Body, &v)
	return v
}

// Server is a running scripted model server.
type Server struct {
	// URL is the server's root; see OpenAIBaseURL and AnthropicBaseURL.
	URL    string
	APIKey string

	t  testing.TB
	mu sync.Mutex
	// models is what GET /v1/models lists; nil answers 404, as a gateway without the list.
	models   []string
	listings int
	// script holds the turns not yet served; served counts IDs.
	script   []Turn
	served   int
	requests []Request
}

// NewServer starts a server that accepts apiKey and answers with turns in order; it is closed
// when the test ends.
func NewServer(t testing.TB, apiKey string, turns ...Turn) *Server {
	t.Helper()
	s := &Server{APIKey: apiKey, t: t, script: turns}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("POST /v1/messages", s.messages)
	mux.HandleFunc("POST /v1/responses", s.responses)
	mux.HandleFunc("GET /v1/models", s.listModels)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// OpenAIBaseURL is the base URL an OpenAI client takes (with /v1).
func (s *Server) OpenAIBaseURL() string { return s.URL + "/v1" }

// AnthropicBaseURL is the base URL an Anthropic client takes (without /v1).
func (s *Server) AnthropicBaseURL() string { return s.URL }

// Script appends turns to the script.
func (s *Server) Script(turns ...Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, turns...)
}

// Requests returns the requests received so far, rejected ones included.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Remaining is the number of turns not yet served.
func (s *Server) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script)
}

// receive records the request and, when authorized, takes the next turn. n numbers the turn
// for IDs.
func (s *Server) receive(w http.ResponseWriter, r *http.Request, authorized func(http.Header) bool, fail func(w http.ResponseWriter, status int, msg string)) (turn Turn, body map[string]any, n int, ok bool) {
	raw, err := io.ReadAll(r.Body)
	s.mu.Lock()
	s.requests = append(s.requests, Request{Path: r.URL.Path, Header: r.Header.Clone(), Body: raw, At: time.Now()})
	s.mu.Unlock()
	if err != nil {
		fail(w, http.StatusBadRequest, "read body: "+err.Error())
		return Turn{}, nil, 0, false
	}
	if !authorized(r.Header) {
		fail(w, http.StatusUnauthorized, "invalid api key")
		return Turn{}, nil, 0, false
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		fail(w, http.StatusBadRequest, "body is not a JSON object: "+err.Error())
		return Turn{}, nil, 0, false
	}
	s.mu.Lock()
	if len(s.script) == 0 {
		s.mu.Unlock()
		s.t.Errorf("modeltest: request to %s after the script ran out", r.URL.Path)
		fail(w, http.StatusBadRequest, "modeltest: script exhausted")
		return Turn{}, nil, 0, false
	}
	turn = s.script[0]
	s.script = s.script[1:]
	s.served++
	n = s.served
	s.mu.Unlock()
	if turn.Answer != nil {
		turn = turn.Answer(raw)
	}

	for k, vs := range turn.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if turn.Status != 0 {
		if turn.Body != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(turn.Status)
			_, _ = io.WriteString(w, turn.Body)
		} else {
			fail(w, turn.Status, turn.Message)
		}
		return Turn{}, nil, 0, false
	}
	if turn.InputTokens == 0 {
		turn.InputTokens = 10
	}
	if turn.OutputTokens == 0 {
		turn.OutputTokens = 5
	}
	return turn, body, n, true
}

// sse writes Server-Sent Events and flushes each one, as the real APIs do.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func startSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

// event writes one event; an empty name writes a bare data line (OpenAI framing).
func (s *sse) event(name string, data any) {
	var buf bytes.Buffer
	if name != "" {
		fmt.Fprintf(&buf, "event: %s\n", name)
	}
	switch d := data.(type) {
	case string:
		fmt.Fprintf(&buf, "data: %s\n\n", d)
	default:
		b, _ := json.Marshal(d)
		fmt.Fprintf(&buf, "data: %s\n\n", b)
	}
	_, _ = s.w.Write(buf.Bytes())
	if s.f != nil {
		s.f.Flush()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// pieces splits a tool call's arguments the way models stream them: in small fragments.
func pieces(s string) []string {
	const size = 8
	var out []string
	for len(s) > size {
		out = append(out, s[:size])
		s = s[size:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func model(body map[string]any) string {
	m, _ := body["model"].(string)
	return m
}

func streaming(body map[string]any) bool {
	b, _ := body["stream"].(bool)
	return b
}

func bearer(h http.Header) string {
	v := h.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return v[7:]
	}
	return ""
}

// created is the fixed creation time in OpenAI objects, so recorded output is stable.
const created = 1700000000

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	turn, body, n, ok := s.receive(w, r, func(h http.Header) bool { return bearer(h) == s.APIKey }, openAIError)
	if !ok {
		return
	}
	id := fmt.Sprintf("chatcmpl-modeltest%04d", n)
	calls := make([]map[string]any, len(turn.ToolCalls))
	for i, c := range turn.ToolCalls {
		if c.ID == "" {
			c.ID = fmt.Sprintf("call_modeltest%04d%02d", n, i)
		}
		calls[i] = map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
	}
	finish := turn.StopReason
	if finish == "" {
		finish = "stop"
		if len(calls) > 0 {
			finish = "tool_calls"
		}
	}
	usage := map[string]any{"prompt_tokens": turn.InputTokens, "completion_tokens": turn.OutputTokens, "total_tokens": turn.InputTokens + turn.OutputTokens}

	if !streaming(body) {
		msg := map[string]any{"role": "assistant", "content": strings.Join(turn.Text, ""), "refusal": nil, "annotations": []any{}}
		if len(calls) > 0 {
			msg["tool_calls"] = calls
			if len(turn.Text) == 0 {
				msg["content"] = nil
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": model(body),
			"choices":            []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
			"usage":              usage,
			"system_fingerprint": nil,
		})
		return
	}

	opts, _ := body["stream_options"].(map[string]any)
	withUsage, _ := opts["include_usage"].(bool)
	out := startSSE(w)
	chunk := func(delta map[string]any, finish any) {
		c := map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model(body), "system_fingerprint": nil,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		}
		if withUsage {
			c["usage"] = nil
		}
		out.event("", c)
	}
	chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil)
	for _, d := range turn.Text {
		time.Sleep(turn.Pace)
		chunk(map[string]any{"content": d}, nil)
	}
	for i, c := range calls {
		fn := c["function"].(map[string]any)
		chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": c["id"], "type": "function", "function": map[string]any{"name": fn["name"], "arguments": ""},
		}}}, nil)
		for _, p := range pieces(fn["arguments"].(string)) {
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": p}}}}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	if withUsage {
		out.event("", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model(body), "system_fingerprint": nil,
			"choices": []any{}, "usage": usage,
		})
	}
	out.event("", "[DONE]")
}

func openAIError(w http.ResponseWriter, status int, msg string) {
	typ, code := "invalid_request_error", any(nil)
	switch {
	case status == http.StatusUnauthorized:
		code = "invalid_api_key"
	case status == http.StatusTooManyRequests:
		typ, code = "requests", "rate_limit_exceeded"
	case status >= 500:
		typ = "server_error"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Anthropic-Version") == "" {
		// Recorded like any other request, but the real API refuses it before anything else.
		raw, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.requests = append(s.requests, Request{Path: r.URL.Path, Header: r.Header.Clone(), Body: raw, At: time.Now()})
		s.mu.Unlock()
		anthropicError(w, http.StatusBadRequest, "anthropic-version: header is required")
		return
	}
	// The API takes the key as x-api-key, or as a bearer token as newer SDKs send it.
	authorized := func(h http.Header) bool { return h.Get("X-Api-Key") == s.APIKey || bearer(h) == s.APIKey }
	turn, body, n, ok := s.receive(w, r, authorized, anthropicError)
	if !ok {
		return
	}
	id := fmt.Sprintf("msg_modeltest%04d", n)
	ids := make([]string, len(turn.ToolCalls))
	for i, c := range turn.ToolCalls {
		ids[i] = c.ID
		if ids[i] == "" {
			ids[i] = fmt.Sprintf("toolu_modeltest%04d%02d", n, i)
		}
	}
	stop := turn.StopReason
	if stop == "" {
		stop = "end_turn"
		if len(turn.ToolCalls) > 0 {
			stop = "tool_use"
		}
	}

	if !streaming(body) {
		content := []any{}
		if len(turn.Text) > 0 {
			content = append(content, map[string]any{"type": "text", "text": strings.Join(turn.Text, "")})
		}
		for i, c := range turn.ToolCalls {
			input := json.RawMessage(c.Arguments)
			if len(input) == 0 {
				input = json.RawMessage("{}")
			}
			content = append(content, map[string]any{"type": "tool_use", "id": ids[i], "name": c.Name, "input": input})
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": model(body), "content": content,
			"stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": turn.InputTokens, "output_tokens": turn.OutputTokens},
		})
		return
	}

	out := startSSE(w)
	out.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model(body), "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": turn.InputTokens, "output_tokens": 1},
	}})
	delta := func(i int, d map[string]any) {
		out.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": d})
	}
	index := 0
	if len(turn.Text) > 0 {
		out.event("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "text", "text": ""}})
		out.event("ping", map[string]any{"type": "ping"})
		for _, d := range turn.Text {
			time.Sleep(turn.Pace)
			delta(index, map[string]any{"type": "text_delta", "text": d})
		}
		out.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
	}
	for i, c := range turn.ToolCalls {
		out.event("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": map[string]any{"type": "tool_use", "id": ids[i], "name": c.Name, "input": map[string]any{}}})
		delta(index, map[string]any{"type": "input_json_delta", "partial_json": ""})
		for _, p := range pieces(c.Arguments) {
			delta(index, map[string]any{"type": "input_json_delta", "partial_json": p})
		}
		out.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
	}
	out.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": turn.OutputTokens}})
	out.event("message_stop", map[string]any{"type": "message_stop"})
}

func anthropicError(w http.ResponseWriter, status int, msg string) {
	typ := "api_error"
	switch status {
	case http.StatusBadRequest:
		typ = "invalid_request_error"
	case http.StatusUnauthorized:
		typ = "authentication_error"
	case http.StatusForbidden:
		typ = "permission_error"
	case http.StatusNotFound:
		typ = "not_found_error"
	case http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case 529:
		typ = "overloaded_error"
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}, "request_id": "req_modeltest"})
}

// Listings counts the GET /v1/models requests served.
func (s *Server) Listings() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listings
}

// SetModels makes GET /v1/models list ids, in both protocols' shape ({"data": [{"id": ...}]});
// nil makes it answer 404 again.
func (s *Server) SetModels(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = ids
}

// listModels answers GET /v1/models for either protocol's key header.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	ids := s.models
	s.listings++ // not among Requests, which are the model calls
	s.mu.Unlock()
	if s.APIKey != "" && r.Header.Get("X-Api-Key") != s.APIKey && bearer(r.Header) != s.APIKey {
		openAIError(w, http.StatusUnauthorized, "invalid api key")
		return
	}
	if ids == nil {
		http.NotFound(w, r)
		return
	}
	data := make([]map[string]any, 0, len(ids))
	for _, id := range ids {
		data = append(data, map[string]any{"id": id, "object": "model", "type": "model"})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "has_more": false})
}

// Images returns the images a request's body carries, oldest first, in either protocol: OpenAI's
// data URLs and Anthropic's base64 sources, wherever they sit in the conversation.
func Images(body []byte) [][]byte {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return nil
	}
	var out [][]byte
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["type"] == "base64" {
				if data, ok := v["data"].(string); ok {
					if b, err := base64.StdEncoding.DecodeString(data); err == nil {
						out = append(out, b)
					}
				}
				return
			}
			url, ok := v["url"].(string) // chat completions: image_url {url}
			if !ok && v["type"] == "input_image" {
				url, ok = v["image_url"].(string) // responses: input_image {image_url}
			}
			if ok && strings.HasPrefix(url, "data:image/") {
				if _, data, ok := strings.Cut(url, ","); ok {
					if b, err := base64.StdEncoding.DecodeString(data); err == nil {
						out = append(out, b)
					}
				}
				return
			}
			// Map order is random: walk the keys of a message in a fixed order.
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				walk(v[k])
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}
