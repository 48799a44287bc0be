package agentvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/agentvm/model"
	"github.com/loomhand/cocoonbox/agentvm/tools"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// Providers of StepRequest.provider.
const (
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
	// ProviderOpenAIResponses is OpenAI's Responses protocol (POST /responses).
	ProviderOpenAIResponses = "openai-responses"
)

// ScreenFits are the image limits each provider documents, which a step's screenshots are
// scaled to: an image past them is scaled down by the provider, and the model's coordinates
// would then be in pixels of an image the agent never saw. Anthropic scales down an image whose
// long edge is over 1568 pixels or that is over about 1.15 megapixels (and refuses one over
// 2000 pixels in a request of many images); OpenAI fits an image in 2048×2048, then its short
// side in 768 pixels.
var ScreenFits = map[string]tools.Fit{
	ProviderAnthropic:       {MaxLongEdge: 1568, MaxPixels: 1_150_000},
	ProviderOpenAI:          {MaxLongEdge: 2048, MaxShortEdge: 768},
	ProviderOpenAIResponses: {MaxLongEdge: 2048, MaxShortEdge: 768},
}

// Loop runs the model's tool loop one step at a time: a step is one model turn plus the tool
// calls it makes. It keeps no state between steps; the conversation travels in the requests.
type Loop struct {
	// Tools are what the model may call, by name.
	Tools []tools.Tool
	// HTTPClient carries the model calls when Links is nil; nil means a client without a total
	// timeout (the step's context bounds it).
	HTTPClient *http.Client
	// Links, when set, carry every model call instead: a box has no network, so each step's
	// calls go over the model links the control plane opens for that step (see wire.LinkPort).
	Links *Links
	// ModelOptions configure the provider adapters (retries).
	ModelOptions []model.Option
	// KeepImages is how many of the conversation's newest images (screenshots) it keeps; older
	// ones become a line of text saying one was there. 0 means DefaultKeepImages.
	KeepImages int

	// lease is the one state kept between steps: whether a person holds the desktop's control
	// lease, as of the highest lease sequence the loop was told. Each step's request and
	// SetDesktopHeld (while steps run) tell it.
	lease struct {
		sync.Mutex
		held bool
		seq  int64
	}
}

// SetDesktopHeld tells the loop a person took (true) or handed back (false) the desktop as of the
// box's lease sequence seq: the desktop actions of steps running from now on are refused (or
// allowed). A word older than one already applied is ignored, so a step request computed before
// a take-over cannot undo it; seq 0 (a caller that does not order) always applies while no
// ordered word came.
func (l *Loop) SetDesktopHeld(held bool, seq int64) {
	l.lease.Lock()
	defer l.lease.Unlock()
	if seq >= l.lease.seq {
		l.lease.held, l.lease.seq = held, seq
	}
}

// desktopHeld says whether a person holds the desktop now.
func (l *Loop) desktopHeld() bool {
	l.lease.Lock()
	defer l.lease.Unlock()
	return l.lease.held
}

// newProvider returns the adapter for a StepRequest's provider. It sends no key: the agent has
// none, the control plane adds it to each call on its way to the gateway.
func (l *Loop) newProvider(provider, baseURL string, hc *http.Client) (model.Provider, error) {
	switch provider {
	case ProviderOpenAI:
		return model.NewOpenAI(baseURL, "", hc, l.ModelOptions...), nil
	case ProviderAnthropic:
		return model.NewAnthropic(baseURL, "", hc, l.ModelOptions...), nil
	case ProviderOpenAIResponses:
		return model.NewOpenAIResponses(baseURL, "", hc, l.ModelOptions...), nil
	}
	return nil, fmt.Errorf("provider must be %q, %q or %q, not %q", ProviderOpenAI, ProviderAnthropic, ProviderOpenAIResponses, provider)
}

// Step runs one step. Bad requests are INVALID_ARGUMENT; model failures carry the provider's
// message (retryable ones UNAVAILABLE, other 4xx INVALID_ARGUMENT); tool failures are results
// the model sees, never an error of the step.
func (l *Loop) Step(ctx context.Context, req *agentvmv1.StepRequest) (*agentvmv1.StepResponse, error) {
	if req.GetBaseUrl() == "" || req.GetModel() == "" {
		return nil, status.Error(codes.InvalidArgument, "base_url and model are required")
	}
	hc := l.HTTPClient
	if l.Links != nil {
		defer l.Links.begin(req.GetRunId(), req.GetStep())()
		var tr *http.Transport
		hc, tr = l.Links.client(req.GetRunId(), req.GetStep())
		defer tr.CloseIdleConnections()
	}
	l.SetDesktopHeld(req.GetDesktopInputRefused(), req.GetLeaseSeq())
	provider, err := l.newProvider(req.GetProvider(), req.GetBaseUrl(), hc)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	ctx = tools.WithFit(ctx, ScreenFits[req.GetProvider()])
	conv, err := decodeConversation(req.GetMessages())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "messages: %v", err)
	}
	if len(conv) == 0 {
		if strings.TrimSpace(req.GetTask()) == "" {
			return nil, status.Error(codes.InvalidArgument, "task is required on the first step")
		}
		conv = append(conv, model.Message{Role: model.RoleUser, Text: req.GetTask()})
	}
	if req.GetMessage() != "" {
		if id := pendingAsk(conv); id != "" {
			// The answer to the question the last step ended with is that call's result.
			conv = append(conv, model.Message{Role: model.RoleTool, ToolCallID: id, Text: Answered + req.GetMessage()})
		} else {
			conv = append(conv, model.Message{Role: model.RoleUser, Text: req.GetMessage()})
		}
	}
	if req.GetFreshScreenshot() {
		look, err := l.look(ctx)
		if err != nil {
			return nil, err
		}
		conv = append(conv, look)
	}

	pruneImages(conv, orDefault(l.KeepImages, DefaultKeepImages))
	mreq := model.Request{
		Model:     req.GetModel(),
		System:    req.GetSystem(),
		Messages:  conv,
		MaxTokens: int(req.GetMaxTokens()),
	}
	for _, t := range l.Tools {
		mreq.Tools = append(mreq.Tools, model.Tool{Name: t.Name(), Description: t.Description(), Parameters: t.Schema()})
	}
	mreq.Tools = append(mreq.Tools, askUserTool, scriptRunTool, guiPlanTool)
	reply, err := provider.Complete(ctx, mreq, nil)
	for _, fallback := range req.GetFallbackModels() {
		if !retryable(err) || ctx.Err() != nil {
			break
		}
		// The model is down or overloaded after every retry: the next one of the run's list.
		mreq.Model = fallback
		reply, err = provider.Complete(ctx, mreq, nil)
	}
	if err != nil {
		return nil, modelStatus(ctx, err)
	}
	conv = append(conv, model.Message{Role: model.RoleAssistant, Text: reply.Text, ToolCalls: reply.ToolCalls})

	resp := &agentvmv1.StepResponse{
		Model:      mreq.Model,
		Done:       len(reply.ToolCalls) == 0,
		Text:       strings.ToValidUTF8(reply.Text, "\uFFFD"),
		StopReason: reply.StopReason,
	}
	for _, call := range reply.ToolCalls {
		var res tools.Result
		var err error
		if call.Name == AskUser {
			q, refusal := question(call.Arguments)
			if refusal == "" && resp.Question == "" {
				// No result yet: the step ends with the question and the answer comes next step.
				resp.Question = q
				resp.ToolCalls = append(resp.ToolCalls, &agentvmv1.ToolCallResult{Id: call.ID, Name: call.Name,
					Arguments: strings.ToValidUTF8(string(call.Arguments), "\uFFFD"), Result: "waiting for the person's answer"})
				continue
			}
			if refusal == "" {
				refusal = "ask_user: one question a turn; ask it all in the first call"
			}
			res = tools.Result{Text: refusal, IsError: true}
		} else if call.Name == GUIPlan {
			items, refusal := plan(call.Arguments)
			if refusal != "" {
				res = tools.Result{Text: refusal, IsError: true}
			} else {
				resp.Plan, res = items, tools.Result{Text: planSummary(items)}
			}
		} else if call.Name == ScriptRun {
			var refused bool
			res, refused, err = l.script(ctx, call.Arguments)
			resp.DesktopRefused = resp.DesktopRefused || refused
		} else if l.refuses(call.Name) {
			res = tools.Result{Text: RefusedWhileControlled, IsError: true}
			resp.DesktopRefused = true
		} else {
			res, err = l.call(ctx, call)
		}
		if err != nil {
			return nil, err
		}
		text := strings.ToValidUTF8(res.Text, "\uFFFD")
		conv = append(conv, model.Message{Role: model.RoleTool, Text: text, ToolCallID: call.ID, Images: res.Images})
		resp.ToolCalls = append(resp.ToolCalls, &agentvmv1.ToolCallResult{
			Id:         call.ID,
			Name:       call.Name,
			Arguments:  strings.ToValidUTF8(string(call.Arguments), "\uFFFD"),
			Result:     text,
			IsError:    res.IsError,
			Images:     int32(len(res.Images)),
			Thumbnails: thumbnails(res.Thumbs),
		})
	}
	pruneImages(conv, orDefault(l.KeepImages, DefaultKeepImages))
	if resp.Messages, err = encodeConversation(conv); err != nil {
		return nil, status.Errorf(codes.Internal, "encode conversation: %v", err)
	}
	return resp, nil
}

// Bounds of the thumbnails a tool call's result carries to the run's timeline.
const (
	MaxThumbnails     = 2
	MaxThumbnailBytes = 128 << 10
)

// thumbnails are the newest MaxThumbnails of thumbs, those within MaxThumbnailBytes.
func thumbnails(thumbs [][]byte) [][]byte {
	var out [][]byte
	for _, t := range thumbs[max(len(thumbs)-MaxThumbnails, 0):] {
		if len(t) > 0 && len(t) <= MaxThumbnailBytes {
			out = append(out, t)
		}
	}
	return out
}

// DefaultKeepImages is how many images a conversation keeps when Loop.KeepImages is zero. A
// computer-use loop takes a screenshot a step; carried whole, a run's 40th step would send the
// model, the journal and the control plane 40 of them, and each step would cost more than the
// last. The newest few are what the model acts on, as the providers' own computer-use loops
// keep them.
const DefaultKeepImages = 3

// OmittedImage is the text an older image leaves in the conversation.
const OmittedImage = "[an earlier screenshot, omitted to keep the conversation small]"

// pruneImages keeps the keep newest images of conv, newest last, and replaces each older one
// with a line of text (OmittedImage) in its message.
func pruneImages(conv []model.Message, keep int) {
	for i := len(conv) - 1; i >= 0; i-- {
		m := &conv[i]
		if len(m.Images) == 0 {
			continue
		}
		if keep >= len(m.Images) {
			keep -= len(m.Images)
			continue
		}
		drop := len(m.Images) - keep
		m.Images = m.Images[drop:]
		keep = 0
		m.Text = strings.TrimLeft(m.Text+strings.Repeat("\n"+OmittedImage, drop), "\n")
	}
}

// HandedBack opens the user message that carries the fresh screenshot after a person hands the
// desktop back.
const HandedBack = "The person who took over the desktop handed it back. This is the desktop now; continue from here."

// screenshotTool is the tool whose image a fresh look at the desktop carries.
const screenshotTool = "desktop_screenshot"

// look is a user message with a screenshot of the desktop as it is now. Without a screenshot
// tool, or when it fails, the message says so and the model carries on without the image.
func (l *Loop) look(ctx context.Context) (model.Message, error) {
	msg := model.Message{Role: model.RoleUser, Text: HandedBack}
	res, err := l.call(ctx, model.ToolCall{Name: screenshotTool, Arguments: json.RawMessage(`{}`)})
	switch {
	case err != nil:
		return model.Message{}, err
	case res.IsError || len(res.Images) == 0:
		msg.Text += " (no screenshot: " + res.Text + ")"
	default:
		msg.Images = res.Images
	}
	return msg, nil
}

// RefusedWhileControlled is what the model is told when it acts on the desktop while a person
// holds the control lease.
const RefusedWhileControlled = "a person is in control of the desktop; wait for them to hand it back before acting on it"

// actsOnDesktop names the tools that act on what a person watching the desktop sees.
var actsOnDesktop = map[string]bool{
	"desktop_click": true, "desktop_move": true, "desktop_type": true, "desktop_key": true, "desktop_scroll": true,
	"desktop_drag": true,
	"browser_open": true, "browser_click": true, "browser_type": true,
}

// refuses says whether a call of the tool named name is refused now: it acts on what a person
// watching sees, and a person holds the desktop's control lease.
func (l *Loop) refuses(name string) bool { return actsOnDesktop[name] && l.desktopHeld() }

// GateDesktop returns ts with the tools that act on the desktop refusing while a person holds its
// control lease, as the loop's steps do: for the in-box MCP, which serves the same tools to
// programs in the box.
func (l *Loop) GateDesktop(ts []tools.Tool) []tools.Tool {
	out := make([]tools.Tool, len(ts))
	for i, t := range ts {
		out[i] = t
		if actsOnDesktop[t.Name()] {
			out[i] = gated{Tool: t, loop: l}
		}
	}
	return out
}

// gated is a desktop tool refusing while the loop's lease is held.
type gated struct {
	tools.Tool
	loop *Loop
}

func (g gated) Call(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	if g.loop.refuses(g.Name()) {
		return tools.Result{Text: RefusedWhileControlled, IsError: true}, nil
	}
	return g.Tool.Call(ctx, args)
}

// call runs one tool call. Everything but the step's own cancellation is a result for the model.
func (l *Loop) call(ctx context.Context, call model.ToolCall) (tools.Result, error) {
	var tool tools.Tool
	names := make([]string, 0, len(l.Tools))
	for _, t := range l.Tools {
		names = append(names, t.Name())
		if t.Name() == call.Name {
			tool = t
		}
	}
	if tool == nil {
		return tools.Result{Text: fmt.Sprintf("unknown tool %q; the tools are: %s", call.Name, strings.Join(names, ", ")), IsError: true}, nil
	}
	res, err := runTool(ctx, tool, call.Arguments)
	if err != nil {
		return tools.Result{}, status.FromContextError(err).Err()
	}
	return res, nil
}

// runTool calls t the way the loop and the in-box MCP both show tools: invalid arguments and
// failures become error results naming the tool; only ctx's own end is an error.
func runTool(ctx context.Context, t tools.Tool, args json.RawMessage) (tools.Result, error) {
	res, err := t.Call(ctx, args)
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		return tools.Result{}, ctx.Err()
	case errors.Is(err, tools.ErrInvalid):
		return tools.Result{Text: fmt.Sprintf("%s: %v; see the tool's schema", t.Name(), err), IsError: true}, nil
	default:
		return tools.Result{Text: fmt.Sprintf("%s failed: %v", t.Name(), err), IsError: true}, nil
	}
}

// modelStatus maps a failed model call to a gRPC status carrying the provider's message.
// retryable says whether err is a model failure another model may not have (overloaded, 5xx).
func retryable(err error) bool {
	var me *model.Error
	return errors.As(err, &me) && me.Retryable
}

func modelStatus(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	var me *model.Error
	if !errors.As(err, &me) {
		return status.Error(codes.Internal, err.Error())
	}
	switch {
	case me.Retryable:
		return status.Error(codes.Unavailable, me.Error())
	case me.Status >= 400 && me.Status < 500:
		return status.Error(codes.InvalidArgument, me.Error())
	default:
		return status.Error(codes.Internal, me.Error())
	}
}

// wireMessage is a conversation message as StepResponse.messages carries it. Arguments are a
// string because a model may write arguments that are not valid JSON.
type wireMessage struct {
	Role       string         `json:"role"`
	Text       string         `json:"text,omitempty"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	Images     [][]byte       `json:"images,omitempty"`
}

type wireToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

func decodeConversation(data []byte) ([]model.Message, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, nil
	}
	var wire []wireMessage
	if err := json.Unmarshal(data, &wire); err != nil {
		return nil, err
	}
	msgs := make([]model.Message, 0, len(wire))
	for i, w := range wire {
		switch w.Role {
		case model.RoleUser, model.RoleAssistant, model.RoleTool:
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, w.Role)
		}
		m := model.Message{Role: w.Role, Text: w.Text, ToolCallID: w.ToolCallID, Images: w.Images}
		for _, c := range w.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, model.ToolCall{ID: c.ID, Name: c.Name, Arguments: json.RawMessage(c.Arguments)})
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

func encodeConversation(msgs []model.Message) ([]byte, error) {
	wire := make([]wireMessage, 0, len(msgs))
	for _, m := range msgs {
		w := wireMessage{Role: m.Role, Text: m.Text, ToolCallID: m.ToolCallID, Images: m.Images}
		for _, c := range m.ToolCalls {
			w.ToolCalls = append(w.ToolCalls, wireToolCall{ID: c.ID, Name: c.Name, Arguments: string(c.Arguments)})
		}
		wire = append(wire, w)
	}
	return json.Marshal(wire)
}
