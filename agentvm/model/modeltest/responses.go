package modeltest

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// responses answers OpenAI's Responses protocol (POST /v1/responses): a response object, or its
// stream of typed events (output items added, text and argument deltas, items done, and
// response.completed with the usage).
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	turn, body, n, ok := s.receive(w, r, func(h http.Header) bool { return bearer(h) == s.APIKey }, openAIError)
	if !ok {
		return
	}
	id := fmt.Sprintf("resp_modeltest%04d", n)
	var output []map[string]any
	text := strings.Join(turn.Text, "")
	if text != "" {
		output = append(output, map[string]any{"type": "message", "id": fmt.Sprintf("msg_modeltest%04d", n), "status": "completed",
			"role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}})
	}
	for i, c := range turn.ToolCalls {
		if c.ID == "" {
			c.ID = fmt.Sprintf("call_modeltest%04d%02d", n, i)
		}
		output = append(output, map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_modeltest%04d%02d", n, i),
			"call_id": c.ID, "name": c.Name, "arguments": c.Arguments, "status": "completed"})
	}
	status := "completed"
	if turn.StopReason != "" {
		status = turn.StopReason
	}
	response := func(status string, output []map[string]any, usage any) map[string]any {
		return map[string]any{"id": id, "object": "response", "created_at": created, "status": status, "model": model(body),
			"output": output, "usage": usage, "error": nil, "incomplete_details": nil}
	}
	usage := map[string]any{"input_tokens": turn.InputTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": turn.OutputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": turn.InputTokens + turn.OutputTokens}
	if !streaming(body) {
		writeJSON(w, http.StatusOK, response(status, output, usage))
		return
	}

	out := startSSE(w)
	seq := 0
	emit := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		out.event(typ, fields)
	}
	emit("response.created", map[string]any{"response": response("in_progress", []map[string]any{}, nil)})
	for i, item := range output {
		switch item["type"] {
		case "message":
			emit("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
				"type": "message", "id": item["id"], "status": "in_progress", "role": "assistant", "content": []any{}}})
			for _, d := range turn.Text {
				time.Sleep(turn.Pace)
				emit("response.output_text.delta", map[string]any{"item_id": item["id"], "output_index": i, "content_index": 0, "delta": d})
			}
			emit("response.output_text.done", map[string]any{"item_id": item["id"], "output_index": i, "content_index": 0, "text": text})
		case "function_call":
			emit("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{
				"type": "function_call", "id": item["id"], "call_id": item["call_id"], "name": item["name"], "arguments": "", "status": "in_progress"}})
			for _, p := range pieces(item["arguments"].(string)) {
				emit("response.function_call_arguments.delta", map[string]any{"item_id": item["id"], "output_index": i, "delta": p})
			}
			emit("response.function_call_arguments.done", map[string]any{"item_id": item["id"], "output_index": i, "arguments": item["arguments"]})
		}
		emit("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	emit("response."+status, map[string]any{"response": response(status, output, usage)})
}
