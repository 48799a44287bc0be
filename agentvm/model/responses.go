package model

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

var _ Provider = (*openAIResponses)(nil)

// openAIResponses speaks OpenAI's Responses protocol (POST /responses), which newer models and
// gateways offer beside chat completions. Nothing is stored on the provider's side (store:
// false): the conversation travels in each request, as it does in the other protocols.
type openAIResponses struct {
	svc    responses.ResponseService
	apiKey string
	retry  Retry
}

// NewOpenAIResponses returns a Provider for an OpenAI-compatible Responses endpoint; baseURL,
// apiKey and hc are as NewOpenAI's.
func NewOpenAIResponses(baseURL, apiKey string, hc *http.Client, opts ...Option) Provider {
	o := buildOptions(opts)
	svc := responses.NewResponseService(openAIOptions(baseURL, apiKey, hc)...)
	return &openAIResponses{svc: svc, apiKey: apiKey, retry: o.retry}
}

func (p *openAIResponses) Complete(ctx context.Context, req Request, onText func(string)) (Response, error) {
	params, err := responsesParams(req)
	if err != nil {
		return Response{}, fmt.Errorf("openai responses: %w", err)
	}
	resp, err := p.retry.run(ctx, onText, func(ctx context.Context, emit func(string)) (Response, error) {
		return p.stream(ctx, params, emit)
	})
	if err != nil {
		return Response{}, fmt.Errorf("openai responses: %w", err)
	}
	return resp, nil
}

// maxResponseCalls bounds the function calls one answer may hold.
const maxResponseCalls = 256

// stream makes one streamed request and assembles its events: text deltas, and function calls
// whole from their output_item.done events.
func (p *openAIResponses) stream(ctx context.Context, params responses.ResponseNewParams, emit func(string)) (Response, error) {
	s := p.svc.NewStreaming(ctx, params)
	defer s.Close()
	var (
		resp     Response
		text     strings.Builder
		finished bool
	)
	for s.Next() {
		ev := s.Current()
		switch ev.Type {
		case "response.output_text.delta":
			if ev.Delta != "" {
				text.WriteString(ev.Delta)
				emit(ev.Delta)
			}
		case "response.output_item.done":
			if ev.Item.Type != "function_call" {
				continue
			}
			if len(resp.ToolCalls) == maxResponseCalls {
				return Response{}, &Error{Message: fmt.Sprintf("more than %d function calls in one answer", maxResponseCalls)}
			}
			args := json.RawMessage(ev.Item.Arguments.OfString)
			if len(args) == 0 {
				args = json.RawMessage("{}")
			}
			resp.ToolCalls = append(resp.ToolCalls, ToolCall{ID: ev.Item.CallID, Name: ev.Item.Name, Arguments: args})
		case "response.completed", "response.incomplete":
			u := ev.Response.Usage
			resp.InputTokens, resp.OutputTokens = int(u.InputTokens), int(u.OutputTokens)
			resp.StopReason = string(ev.Response.Status)
			if ev.Type == "response.incomplete" && ev.Response.IncompleteDetails.Reason != "" {
				resp.StopReason = ev.Response.IncompleteDetails.Reason
			}
			finished = true
		case "response.failed":
			msg := ev.Response.Error.Message
			if msg == "" {
				msg = "the response failed"
			}
			return Response{}, &Error{Message: msg, Retryable: ev.Response.Error.Code == "server_error"}
		case "error":
			return Response{}, &Error{Message: cmp.Or(ev.Message, "the stream reported an error"), Retryable: true}
		}
	}
	if err := s.Err(); err != nil {
		return Response{}, streamError(ctx, p.apiKey, err)
	}
	if !finished {
		return Response{}, &Error{Message: "stream ended without response.completed", Retryable: true}
	}
	resp.Text = text.String()
	return resp, nil
}

func responsesParams(req Request) (responses.ResponseNewParams, error) {
	params := responses.ResponseNewParams{
		Model: req.Model,
		Store: openai.Bool(false),
	}
	if req.MaxTokens > 0 {
		params.MaxOutputTokens = openai.Int(int64(req.MaxTokens))
	}
	if req.System != "" {
		params.Instructions = openai.String(req.System)
	}
	items, err := responsesInput(req.Messages)
	if err != nil {
		return params, err
	}
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: items}
	for _, t := range req.Tools {
		fn := responses.FunctionToolParam{Name: t.Name, Strict: openai.Bool(false)}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		if len(t.Parameters) > 0 {
			if err := json.Unmarshal(t.Parameters, &fn.Parameters); err != nil {
				return params, fmt.Errorf("tool %s parameters: %w", t.Name, err)
			}
		}
		params.Tools = append(params.Tools, responses.ToolUnionParam{OfFunction: &fn})
	}
	return params, nil
}

// responsesInput maps the conversation to input items. A function call's output is text; the
// images of tool results follow in one user message after each run of outputs, as in chat
// completions.
func responsesInput(msgs []Message) (responses.ResponseInputParam, error) {
	var (
		out     responses.ResponseInputParam
		pending responses.ResponseInputMessageContentListParam
	)
	message := func(role responses.EasyInputMessageRole, content responses.EasyInputMessageContentUnionParam) {
		out = append(out, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{Role: role, Content: content}})
	}
	flush := func() {
		if len(pending) > 0 {
			message(responses.EasyInputMessageRoleUser, responses.EasyInputMessageContentUnionParam{OfInputItemContentList: pending})
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
				message(responses.EasyInputMessageRoleUser, responses.EasyInputMessageContentUnionParam{OfString: openai.String(m.Text)})
				continue
			}
			var parts responses.ResponseInputMessageContentListParam
			if m.Text != "" {
				parts = append(parts, inputText(m.Text))
			}
			parts = append(parts, inputImages(m.Images)...)
			message(responses.EasyInputMessageRoleUser, responses.EasyInputMessageContentUnionParam{OfInputItemContentList: parts})
		case RoleAssistant:
			if m.Text != "" || len(m.ToolCalls) == 0 {
				message(responses.EasyInputMessageRoleAssistant, responses.EasyInputMessageContentUnionParam{OfString: openai.String(m.Text)})
			}
			for _, c := range m.ToolCalls {
				out = append(out, responses.ResponseInputItemUnionParam{OfFunctionCall: &responses.ResponseFunctionToolCallParam{
					CallID: c.ID, Name: c.Name, Arguments: string(c.Arguments),
				}})
			}
		case RoleTool:
			out = append(out, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
				CallID: openai.String(m.ToolCallID),
				Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String(m.Text)},
			}})
			if len(m.Images) > 0 {
				pending = append(pending, inputText(fmt.Sprintf("Images from tool call %s:", m.ToolCallID)))
				pending = append(pending, inputImages(m.Images)...)
			}
		default:
			return nil, fmt.Errorf("message role %q unknown", m.Role)
		}
	}
	flush()
	return out, nil
}

func inputText(s string) responses.ResponseInputContentUnionParam {
	return responses.ResponseInputContentUnionParam{OfInputText: &responses.ResponseInputTextParam{Text: s}}
}

func inputImages(images [][]byte) []responses.ResponseInputContentUnionParam {
	out := make([]responses.ResponseInputContentUnionParam, 0, len(images))
	for _, img := range images {
		out = append(out, responses.ResponseInputContentUnionParam{OfInputImage: &responses.ResponseInputImageParam{
			ImageURL: openai.String(dataURL(img)), Detail: responses.ResponseInputImageDetailAuto,
		}})
	}
	return out
}
