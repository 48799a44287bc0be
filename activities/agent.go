package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// AgentRunStore is the part of the database agent runs use: the run's state and its steps, with
// the conversation each step left, and what authorizes a step: the run's row, its box and the
// starter's share of it.
type AgentRunStore interface {
	SetAgentRunState(ctx context.Context, id string, state cocoonbox.AgentRunState, reason string) error
	AppendAgentStep(ctx context.Context, s store.NewAgentStep) error
	AgentConversation(ctx context.Context, run string, step int) ([]byte, error)
	AgentRunByID(ctx context.Context, id string) (store.AgentRun, error)
	BoxByID(ctx context.Context, id cocoonbox.BoxID) (store.Box, error)
	ShareRole(ctx context.Context, boxID cocoonbox.BoxID, userID string) (cocoonbox.Role, error)
	AppendEvent(ctx context.Context, e store.Event) error
}

// SecretOpener opens an owner's vault secret in clear (internal/vault.Vault).
type SecretOpener interface {
	Open(ctx context.Context, ownerID, name string) (string, error)
}

// Agent holds the activities of the agent run workflow: one step of the in-box agent, and the
// run's state. Model keys and the box credential are resolved here and never leave the worker:
// the key is added to the box's model calls on their way to the gateway (see Gateway).
type Agent struct {
	// Link reaches the box's agent: its sandbox, credential and version.
	Link *boxlink.Link
	Runs AgentRunStore
	// Attempts is the store of best-of-N runs, for their judge; nil judges none.
	Attempts AttemptsStore
	Vault    SecretOpener
	// Usage is the ledger of model calls, which also bounds a run's tokens; nil meters nothing.
	Usage UsageLedger
	// Texts streams the model's text to the run's followers as the gateway sends it; nil
	// streams nothing (followers see each step's text once it is recorded).
	Texts RunTexts
	// Gateway returns the operator's model gateway, read at each step: the worker's
	// configuration, never a workflow's input.
	Gateway func() Gateway
	// Wake brings the box up through its workflow's wake update (a no-op for a running box), so a
	// step finds a sandbox even after the box hibernated or lost its node, and returns the
	// desktop's control lease. nil skips it.
	Wake func(ctx context.Context, boxID cocoonbox.BoxID) (BoxLease, error)
	// DialGateway dials the model gateway for the box's model calls (the box has no network);
	// nil means a net.Dialer with a 10 s timeout. Only the Gateway's host is dialed.
	DialGateway func(ctx context.Context, network, addr string) (net.Conn, error)

	prelinks prelinks   // model links opened for the next steps of runs
	models   modelLists // the gateways' model lists, checked at a run's first step
}

// BoxLease is the box's desktop control lease as its workflow knows it: who holds it ("" for
// nobody) and how many times it changed hands, which orders what the box's agent is told.
type BoxLease struct {
	Controller string
	Seq        int64
}

// StepInput is one step of a run. It carries no authority: the gateway, its protocol and the
// key's secret are the worker's Gateway, and whom the run acts for is its row in the database,
// which the step checks against the input before it opens a secret. The conversation is loaded
// from step Step-1's row.
type StepInput struct {
	RunID string
	BoxID cocoonbox.BoxID
	// Owner is the run's starter as the workflow was told; the run's row must say the same.
	Owner string
	Step  int    // from 1
	Model string // must be the run's row's model
	// System and Task are the run's prompts.
	System  string
	Task    string
	Message string // a user message for this step; "" for none
	// FreshScreenshot has the agent look at the desktop before the model turn (the first step
	// after a person handed the desktop back).
	FreshScreenshot bool
}

// StepResult is what the workflow needs of a step; the rest is in the step's row.
type StepResult struct {
	Done      bool
	Text      string // what the model said, cut to maxStepText
	ToolCalls int
	Replayed  bool
	// DesktopRefused: a tool call was refused because a person holds the desktop.
	DesktopRefused bool
	// Controller is who held the desktop's control lease when the step started ("" for nobody).
	Controller string
	// Question is what the model asked the run's starter (ask_user): the run waits for the
	// answer, the next step's message.
	Question string
}

// RunStateInput is a run state to record.
type RunStateInput struct {
	RunID  string
	State  cocoonbox.AgentRunState
	Reason string
}

// maxStepText bounds the text a step carries in payloads and rows; the whole is in the
// conversation.
const maxStepText = 4 << 10

// Step runs one step of the run in the box's agent and records it. A retry of the same step is
// safe: the agent answers a completed step from its journal, and the row is replaced.
func (a *Agent) Step(ctx context.Context, in StepInput) (StepResult, error) {
	if in.RunID == "" || strings.ContainsFunc(in.RunID, unicode.IsSpace) || in.Step < 1 {
		// A run ID is a word of the model links' first line.
		return StepResult{}, classify(cocoonbox.Invalid("step", "needs a run ID without spaces and a step from 1"))
	}
	if err := in.BoxID.Validate(); err != nil {
		return StepResult{}, classify(err)
	}
	var gw Gateway
	if a.Gateway != nil {
		gw = a.Gateway()
	}
	if _, err := gw.route(""); err != nil {
		return StepResult{}, newError(ErrTypeInvalidArgument, fmt.Errorf("the worker's agent configuration: %w", err))
	}
	// Nothing is woken, read or opened for a run the database does not confirm.
	run, err := a.authorizeRun(ctx, in, gw)
	if err != nil {
		return StepResult{}, err
	}
	var lease BoxLease
	if a.Wake != nil {
		// A hibernated box restores for as long as it takes; heartbeats keep the step alive.
		if lease, err = whileHeartbeating(ctx, func(ctx context.Context) (BoxLease, error) {
			return a.Wake(ctx, in.BoxID)
		}); err != nil {
			if cocoonbox.ErrorCode(err) == cocoonbox.EResourceExhausted {
				// The owner's box-hours budget is used: no try will wake the box this month.
				return StepResult{}, newError(ErrTypeBudget, fmt.Errorf("wake box %s: %w", in.BoxID, err))
			}
			return StepResult{}, classify(fmt.Errorf("wake box %s: %w", in.BoxID, err))
		}
	}
	box, err := a.Link.Find(ctx, in.BoxID)
	if err != nil {
		if cocoonbox.ErrorCode(err) == cocoonbox.ENotFound {
			return StepResult{}, newError(ErrTypeUnavailable, fmt.Errorf("box %s has no sandbox yet", in.BoxID))
		}
		return StepResult{}, classify(err)
	}
	var conv []byte
	if in.Step > 1 {
		if conv, err = a.Runs.AgentConversation(ctx, in.RunID, in.Step-1); err != nil {
			return StepResult{}, classify(fmt.Errorf("load conversation: %w", err))
		}
	}
	var key string
	if gw.KeySecret != "" {
		if key, err = a.Vault.Open(ctx, run.Owner, gw.KeySecret); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return StepResult{}, newError(ErrTypeInvalidArgument, fmt.Errorf("model key: no secret called %s", gw.KeySecret))
			}
			return StepResult{}, classify(fmt.Errorf("open model key %s: %w", gw.KeySecret, err))
		}
	}
	rt, err := gw.route(key)
	if err != nil {
		return StepResult{}, newError(ErrTypeInvalidArgument, fmt.Errorf("the worker's agent configuration: %w", err))
	}
	if in.Step == 1 {
		// A model the gateway does not offer fails the run at once, naming the ones it does.
		if err := a.checkModel(ctx, rt, run.Model); err != nil {
			return StepResult{}, newError(ErrTypeInvalidArgument, err)
		}
	}
	if err := a.Link.EnsureCredential(ctx, box); err != nil {
		return StepResult{}, sandboxError(err)
	}
	if err := a.Link.CheckVersion(ctx, box); err != nil {
		return StepResult{}, classify(err)
	}
	req := &agentvmv1.StepRequest{
		// The agent's model client speaks plain HTTP to the links; the key is added on the way out.
		RunId: in.RunID, Step: int32(in.Step), Provider: gw.Provider, BaseUrl: rt.boxBase, Model: run.Model,
		System: in.System, Task: in.Task, Messages: conv, Message: in.Message,
		// While a person drives the desktop the agent's desktop actions are refused, not raced.
		DesktopInputRefused: lease.Controller != "",
		LeaseSeq:            lease.Seq,
		FreshScreenshot:     in.FreshScreenshot,
		FallbackModels:      fallbacks(gw.FallbackModels, run.Model),
	}
	mt := &meter{ledger: a.Usage, texts: a.Texts, call: store.ModelCall{RunID: in.RunID, Step: in.Step, BoxID: in.BoxID, User: run.Owner, Model: run.Model}}
	if err := mt.begin(ctx); err != nil {
		// Spent before the step: nothing is asked of the box.
		return StepResult{}, newError(ErrTypeBudget, errors.New(mt.refused()))
	}
	resp, err := whileHeartbeating(ctx, func(ctx context.Context) (*agentvmv1.StepResponse, error) {
		// The box has no network: its model calls go over the links kept open meanwhile.
		defer a.keepLinks(ctx, box, in.RunID, in.Step, rt, mt)()
		var resp *agentvmv1.StepResponse
		err := a.Link.Agents(ctx, box, func(ctx context.Context, c agentvmv1.AgentsClient) (err error) {
			resp, err = c.Step(ctx, req)
			return err
		})
		return resp, err
	})
	if why := mt.refused(); why != "" {
		// The agent's model client was refused for the run's bound: the run stops, saying so.
		return StepResult{}, newError(ErrTypeBudget, errors.New(why))
	}
	if err != nil {
		return StepResult{}, agentError(ctx, err)
	}
	if !resp.GetDone() && ctx.Err() == nil {
		// The run's next step will want a link for its model call first thing. Opened already
		// when the model answered (keepLinks), unless the agent answered the step from its
		// journal without a model call; open does nothing the second time.
		a.prelinks.open(a.Link.Sandbox, box, in.RunID, in.Step+1)
	}
	if err := a.Runs.AppendAgentStep(ctx, stepRow(in, resp)); err != nil {
		return StepResult{}, classify(fmt.Errorf("record step: %w", err))
	}
	return StepResult{Done: resp.GetDone(), Text: cut(resp.GetText(), maxStepText),
		ToolCalls: len(resp.GetToolCalls()), Replayed: resp.GetReplayed(),
		DesktopRefused: resp.GetDesktopRefused(), Controller: lease.Controller,
		Question: cut(resp.GetQuestion(), maxQuestion)}, nil
}

// authorizeRun returns the run's row once the database confirms the step may act for it: the
// run exists, on this box, started by the input's owner, who still holds driver on the box (its
// owner, or an active driver or admin share), with a model the gateway allows. A refusal is
// permanent and says why; it comes before anything is woken or opened.
func (a *Agent) authorizeRun(ctx context.Context, in StepInput, gw Gateway) (store.AgentRun, error) {
	refuse := func(format string, args ...any) error {
		return classify(cocoonbox.Errorf(cocoonbox.EForbidden, "run %s refused: "+format, append([]any{in.RunID}, args...)...))
	}
	run, err := a.Runs.AgentRunByID(ctx, in.RunID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.AgentRun{}, refuse("no such run was started through the API")
	case err != nil:
		return store.AgentRun{}, classify(fmt.Errorf("read run %s: %w", in.RunID, err))
	case run.BoxID != in.BoxID:
		return store.AgentRun{}, refuse("it runs on box %s, not %s", run.BoxID, in.BoxID)
	case run.Owner != in.Owner:
		return store.AgentRun{}, refuse("it was started by %s, not %s", run.Owner, in.Owner)
	case in.Model != "" && in.Model != run.Model:
		return store.AgentRun{}, refuse("it was started with model %q, not %q", run.Model, in.Model)
	case !gw.allows(run.Model):
		return store.AgentRun{}, refuse("model %q is not among the gateway's models", run.Model)
	}
	box, err := a.Runs.BoxByID(ctx, run.BoxID)
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && box.DeletedAt != nil):
		return store.AgentRun{}, refuse("box %s is gone", run.BoxID)
	case err != nil:
		return store.AgentRun{}, classify(fmt.Errorf("read box %s: %w", run.BoxID, err))
	}
	role := cocoonbox.RoleOwner
	if box.Owner != run.Owner {
		role, err = a.Runs.ShareRole(ctx, run.BoxID, run.Owner)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return store.AgentRun{}, refuse("its starter %s no longer has a share of box %s", run.Owner, run.BoxID)
		case err != nil:
			return store.AgentRun{}, classify(fmt.Errorf("read share of box %s: %w", run.BoxID, err))
		}
	}
	if !role.Allows(cocoonbox.RoleDriver) {
		return store.AgentRun{}, refuse("its starter %s holds %s on box %s; runs need %s", run.Owner, role, run.BoxID, cocoonbox.RoleDriver)
	}
	return run, nil
}

// SetRunState records the run's state, and as an event of its box (which webhooks hear) the
// run's end, run.finished, and a question it waits on, run.question.
func (a *Agent) SetRunState(ctx context.Context, in RunStateInput) error {
	if err := a.Runs.SetAgentRunState(ctx, in.RunID, in.State, in.Reason); err != nil {
		return classify(fmt.Errorf("set run %s state: %w", in.RunID, err))
	}
	action := "run.finished"
	switch in.State {
	case cocoonbox.AgentRunSucceeded, cocoonbox.AgentRunFailed, cocoonbox.AgentRunCancelled:
	case cocoonbox.AgentRunWaitingForUser:
		action = "run.question"
	default:
		return nil
	}
	run, err := a.Runs.AgentRunByID(ctx, in.RunID)
	if err != nil {
		return classify(fmt.Errorf("run %s: %w", in.RunID, err))
	}
	detail, _ := json.Marshal(map[string]any{"run": in.RunID, "state": in.State, "reason": in.Reason})
	// A retried activity may record the end twice; a webhook receiver dedups by event, and the
	// run's own row has one state.
	if err := a.Runs.AppendEvent(ctx, store.Event{Actor: run.Owner, BoxID: string(run.BoxID), Action: action, Detail: detail}); err != nil {
		return classify(fmt.Errorf("record run %s %s: %w", in.RunID, action, err))
	}
	return nil
}

// CancelStepInput names the run whose step in the box to stop.
type CancelStepInput struct {
	RunID string
	BoxID cocoonbox.BoxID
}

// CancelStep tells the box's agent to stop the run's step in progress. The agent runs a step
// detached from its caller, so that a retried activity finds it finished; a cancelled run's step
// must therefore be stopped in the box, not only abandoned by the activity. A box without a
// sandbox has nothing running.
func (a *Agent) CancelStep(ctx context.Context, in CancelStepInput) error {
	return a.onRunningAgent(ctx, in.BoxID, func(ctx context.Context, c agentvmv1.AgentsClient) error {
		_, err := c.Cancel(ctx, &agentvmv1.CancelRequest{RunId: in.RunID})
		return err
	})
}

// DesktopLeaseInput tells a box's agent whether a person holds the desktop's control lease.
type DesktopLeaseInput struct {
	BoxID cocoonbox.BoxID
	Held  bool
	Seq   int64 // the box's lease sequence after the change (BoxLease.Seq)
}

// SetDesktopLease tells the box's agent of a lease change while a step runs, so that step's
// desktop actions stop (or may go on) at once rather than from the next step, whose request
// carries the lease anyway.
func (a *Agent) SetDesktopLease(ctx context.Context, in DesktopLeaseInput) error {
	return a.onRunningAgent(ctx, in.BoxID, func(ctx context.Context, c agentvmv1.AgentsClient) error {
		_, err := c.SetDesktopLease(ctx, &agentvmv1.SetDesktopLeaseRequest{Held: in.Held, LeaseSeq: in.Seq})
		return err
	})
}

// onRunningAgent makes call on the agent of the box's sandbox, if it has one: a box without a
// sandbox runs no step, so there is nothing to tell; it is not woken through its workflow.
func (a *Agent) onRunningAgent(ctx context.Context, boxID cocoonbox.BoxID, call func(context.Context, agentvmv1.AgentsClient) error) error {
	box, err := a.Link.Find(ctx, boxID)
	switch {
	case cocoonbox.ErrorCode(err) == cocoonbox.ENotFound:
		return nil
	case err != nil:
		return classify(err)
	}
	return agentError(ctx, a.Link.Agents(ctx, box, call))
}

// agentError classifies what a call on the box's agent returned (a domain error from
// boxlink.Error): a request or model the agent refuses is permanent; an agent that is not up
// yet, or a relay that cannot reach it, is retried.
func agentError(ctx context.Context, err error) error {
	return classify(boxlink.Error(ctx, err))
}

// sandboxError classifies an engine error on the way to the agent. A sandbox the engine no
// longer has is retried rather than permanent: the next try's wake brings the box a new one.
func sandboxError(err error) error {
	if errors.Is(err, sandbox.ErrNotFound) {
		return newError(ErrTypeUnavailable, err)
	}
	return classify(err)
}

func stepRow(in StepInput, resp *agentvmv1.StepResponse) store.NewAgentStep {
	p := store.StepPayload{Text: cut(resp.GetText(), maxStepText), Message: cut(in.Message, maxStepText),
		Done: resp.GetDone(), StopReason: resp.GetStopReason(), Replayed: resp.GetReplayed(),
		Question: cut(resp.GetQuestion(), maxQuestion)}
	for _, it := range resp.GetPlan() {
		p.Plan = append(p.Plan, store.PlanItem{Text: cut(it.GetText(), 200), Status: it.GetStatus()})
	}
	var names []string
	for _, tc := range resp.GetToolCalls() {
		p.ToolCalls = append(p.ToolCalls, store.StepToolCall{Name: tc.GetName(), IsError: tc.GetIsError(), Images: tc.GetImages(), Result: cut(tc.GetResult(), 1<<10)})
		names = append(names, tc.GetName())
	}
	payload, _ := json.Marshal(p) // plain strings and numbers: cannot fail
	return store.NewAgentStep{RunID: in.RunID, Step: in.Step, Kind: "model_turn",
		Summary: stepSummary(resp.GetText(), names), Payload: payload, Conversation: resp.GetMessages(),
		Images: thumbnails(resp)}
}

// Bounds of the thumbnails a step keeps: the agent's are 320 pixels wide.
const (
	maxStepImages     = 4
	maxStepImageBytes = 128 << 10
	maxStepImageSide  = 1280
)

// thumbnails are the screenshots' thumbnails a step's answer carries that are PNGs within the
// bounds, at most maxStepImages: the box's word, so each is checked before it is kept and served.
func thumbnails(resp *agentvmv1.StepResponse) [][]byte {
	var out [][]byte
	for _, tc := range resp.GetToolCalls() {
		for _, b := range tc.GetThumbnails() {
			if len(out) == maxStepImages {
				return out
			}
			if len(b) > maxStepImageBytes {
				continue
			}
			c, err := png.DecodeConfig(bytes.NewReader(b))
			if err != nil || c.Width < 1 || c.Height < 1 || c.Width > maxStepImageSide || c.Height > maxStepImageSide {
				continue
			}
			out = append(out, b)
		}
	}
	return out
}

// stepSummary is the step's one line: the tools it called, else the first line of its text.
func stepSummary(text string, tools []string) string {
	if len(tools) > 0 {
		return cut("called "+strings.Join(tools, ", "), 200)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
	return cut(line, 200)
}

// cut shortens s to at most n bytes on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// fallbacks are a run's fallback models: the gateway's, without the run's own model.
func fallbacks(all []string, model string) []string {
	var out []string
	for _, m := range all {
		if m != model {
			out = append(out, m)
		}
	}
	return out
}
