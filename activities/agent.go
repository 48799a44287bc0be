package activities

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/secrets"
	"github.com/loomhand/cocoonbox/internal/store"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// AgentPort is where the in-box agent (cocoonbox-agent serve) listens on the box's loopback for
// gRPC; its model links are on AgentLinkPort.
const AgentPort = 7070

// AgentCredentialPath is the file in the box the agent reads its per-box credential from; it
// re-reads it when it changes.
const AgentCredentialPath = "/run/cocoonbox/agent-credential"

// MinAgentVersion is the oldest in-box agent whose protocol agent runs rely on: keyless model
// calls in plain HTTP over the links (0.8.0; an older agent would send its calls in TLS the
// worker no longer pipes), SetDesktopLease (0.6.1), the refusal of desktop input (0.3.0). A box
// keeps the agent of the image it was created from, so a step on an older one is refused with
// the reason rather than run by an agent that would ignore what it does not know.
const MinAgentVersion = "0.8.0"

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
}

// SecretOpener opens an owner's vault secret in clear (internal/vault.Vault).
type SecretOpener interface {
	Open(ctx context.Context, ownerID, name string) (string, error)
}

// Agent holds the activities of the agent run workflow: one step of the in-box agent, and the
// run's state. Model keys and the box credential are resolved here and never leave the worker:
// the key is added to the box's model calls on their way to the gateway (see Gateway).
type Agent struct {
	Sandbox sandbox.Client
	Tokens  TokenStore
	Runs    AgentRunStore
	Vault   SecretOpener
	// Gateway returns the operator's model gateway, read at each step: the worker's
	// configuration, never a workflow's input.
	Gateway func() Gateway
	// Credentials derives a box's agent credential (see AgentCredential).
	Credentials func(boxID cocoonbox.BoxID) (string, error)
	// Wake brings the box up through its workflow's wake update (a no-op for a running box), so a
	// step finds a sandbox even after the box hibernated or lost its node, and returns the
	// desktop's control lease. nil skips it.
	Wake func(ctx context.Context, boxID cocoonbox.BoxID) (BoxLease, error)
	// DialGateway dials the model gateway for the box's model calls (the box has no network);
	// nil means a net.Dialer with a 10 s timeout. Only the Gateway's host is dialed.
	DialGateway func(ctx context.Context, network, addr string) (net.Conn, error)

	written sync.Map // sandbox ID → credential known to be in that sandbox
	current sync.Map // sandbox ID → true once its agent is known to be MinAgentVersion or newer
}

// AgentCredential is the per-box agent credential: hex HMAC-SHA256 of the box ID under key.
func AgentCredential(key []byte, boxID cocoonbox.BoxID) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(boxID))
	return hex.EncodeToString(m.Sum(nil))
}

// AgentCredentials derives boxes' agent credentials from the keyring. Every worker and API server
// of a deployment shares the keyring, so each derives the same credential for a box: the worker
// writes it into the box, the API server presents it to the box's agent.
func AgentCredentials(keys *secrets.Keyring) func(cocoonbox.BoxID) (string, error) {
	key := keys.Derive("agent-credential")
	return func(id cocoonbox.BoxID) (string, error) { return AgentCredential(key, id), nil }
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
			return StepResult{}, classify(fmt.Errorf("wake box %s: %w", in.BoxID, err))
		}
	}
	sid, token, err := a.Tokens.SandboxToken(ctx, string(in.BoxID))
	if err != nil {
		if cocoonbox.ErrorCode(err) == cocoonbox.ENotFound {
			return StepResult{}, newError(ErrTypeUnavailable, fmt.Errorf("box %s has no sandbox yet", in.BoxID))
		}
		return StepResult{}, classify(fmt.Errorf("read sandbox token: %w", err))
	}
	ref := sandbox.SandboxRef{ID: sid, Token: token}
	var conv []byte
	if in.Step > 1 {
		if conv, err = a.Runs.AgentConversation(ctx, in.RunID, in.Step-1); err != nil {
			return StepResult{}, storeError(fmt.Errorf("load conversation: %w", err))
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
	cred, err := a.Credentials(in.BoxID)
	if err != nil {
		return StepResult{}, classify(fmt.Errorf("derive agent credential: %w", err))
	}
	if err := a.ensureCredential(ctx, ref, cred); err != nil {
		return StepResult{}, err
	}
	if err := a.checkAgentVersion(ctx, in.BoxID, ref, cred); err != nil {
		return StepResult{}, err
	}
	req := &agentvmv1.StepRequest{
		// The agent's model client speaks plain HTTP to the links; the key is added on the way out.
		RunId: in.RunID, Step: int32(in.Step), Provider: gw.Provider, BaseUrl: rt.boxBase, Model: run.Model,
		System: in.System, Task: in.Task, Messages: conv, Message: in.Message,
		// While a person drives the desktop the agent's desktop actions are refused, not raced.
		DesktopInputRefused: lease.Controller != "",
		LeaseSeq:            lease.Seq,
		FreshScreenshot:     in.FreshScreenshot,
	}
	resp, err := whileHeartbeating(ctx, func(ctx context.Context) (*agentvmv1.StepResponse, error) {
		// The box has no network: its model calls go over the links kept open meanwhile.
		defer a.keepLinks(ctx, ref, cred, in.RunID, in.Step, rt)()
		return a.callStep(ctx, ref, cred, req)
	})
	if err != nil {
		return StepResult{}, a.agentCallError(ctx, sid, err)
	}
	if err := a.Runs.AppendAgentStep(ctx, stepRow(in, resp)); err != nil {
		return StepResult{}, storeError(fmt.Errorf("record step: %w", err))
	}
	return StepResult{Done: resp.GetDone(), Text: cut(resp.GetText(), maxStepText),
		ToolCalls: len(resp.GetToolCalls()), Replayed: resp.GetReplayed(),
		DesktopRefused: resp.GetDesktopRefused(), Controller: lease.Controller}, nil
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

// SetRunState records the run's state.
func (a *Agent) SetRunState(ctx context.Context, in RunStateInput) error {
	if err := a.Runs.SetAgentRunState(ctx, in.RunID, in.State, in.Reason); err != nil {
		return storeError(fmt.Errorf("set run %s state: %w", in.RunID, err))
	}
	return nil
}

// agentCallError classifies an error of a call on the sandbox's agent, forgetting the credential
// it refused: the file may be gone (a restored box), so the next attempt writes it again.
func (a *Agent) agentCallError(ctx context.Context, sandboxID string, err error) error {
	if status.Code(err) == codes.Unauthenticated {
		a.written.Delete(sandboxID)
	}
	return agentError(ctx, err)
}

// checkAgentVersion refuses a sandbox whose agent is older than MinAgentVersion, asking it once
// per sandbox (a sandbox's agent binary never changes: a box gets a new one only with a new
// sandbox).
func (a *Agent) checkAgentVersion(ctx context.Context, boxID cocoonbox.BoxID, ref sandbox.SandboxRef, cred string) error {
	if _, ok := a.current.Load(ref.ID); ok {
		return nil
	}
	info, err := CallAgent(ctx, a.Sandbox, ref, cred, func(ctx context.Context, conn *grpc.ClientConn) (*agentvmv1.InfoResponse, error) {
		return agentvmv1.NewInfoClient(conn).Get(ctx, &agentvmv1.GetInfoRequest{})
	})
	if err != nil {
		return a.agentCallError(ctx, ref.ID, err)
	}
	if !versionAtLeast(info.GetVersion(), MinAgentVersion) {
		return newError(ErrTypeConflict, fmt.Errorf(
			"box %s runs cocoonbox-agent %q, older than the %s agent runs need: the box was created from an older image; run the agent in a new box",
			boxID, info.GetVersion(), MinAgentVersion))
	}
	a.current.Store(ref.ID, true)
	return nil
}

// versionAtLeast says whether version (major.minor.patch) is min or newer; a version that does
// not parse is not.
func versionAtLeast(version, min string) bool {
	v, ok := parseVersion(version)
	m, okMin := parseVersion(min)
	if !ok || !okMin {
		return false
	}
	for i := range v {
		if v[i] != m[i] {
			return v[i] > m[i]
		}
	}
	return true
}

func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.Split(s, ".")
	if len(parts) != len(v) {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// ensureCredential writes cred to AgentCredentialPath in the sandbox unless this worker knows it
// is there already.
func (a *Agent) ensureCredential(ctx context.Context, ref sandbox.SandboxRef, cred string) error {
	if v, ok := a.written.Load(ref.ID); ok && v.(string) == cred {
		return nil
	}
	if err := writeAgentCredential(ctx, a.Sandbox, ref, cred); err != nil {
		return sandboxError(err)
	}
	a.written.Store(ref.ID, cred)
	return nil
}

// writeAgentCredential writes cred to AgentCredentialPath in the sandbox through the engine's
// exec (the agent need not be up, nor in the image), leaving a file that already holds it
// untouched. The credential travels in the exec's environment, not its argv, so the engine's logs
// of commands do not show it. Engine errors are wrapped as they are; a failed write is a
// cocoonbox EUnavailable error.
func writeAgentCredential(ctx context.Context, sb sandbox.Client, ref sandbox.SandboxRef, cred string) error {
	const script = `f=` + AgentCredentialPath + `
[ "$(cat "$f" 2>/dev/null)" = "$COCOONBOX_CRED" ] && exit 0
mkdir -p "$(dirname "$f")" && umask 077 && printf %s "$COCOONBOX_CRED" > "$f.tmp" && mv -f "$f.tmp" "$f"`
	res, err := sb.Exec(ctx, ref, sandbox.ExecRequest{
		Argv: []string{"sh", "-c", script}, Env: map[string]string{"COCOONBOX_CRED": cred}, TimeoutSeconds: 30,
	})
	if err != nil {
		return fmt.Errorf("write agent credential: %w", err)
	}
	if res.ExitCode != 0 {
		return cocoonbox.Errorf(cocoonbox.EUnavailable, "write agent credential: exit %d: %s", res.ExitCode, cut(res.Stderr, 200))
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
	sid, token, err := a.Tokens.SandboxToken(ctx, string(boxID))
	switch {
	case cocoonbox.ErrorCode(err) == cocoonbox.ENotFound:
		return nil
	case err != nil:
		return classify(fmt.Errorf("read sandbox token: %w", err))
	}
	cred, err := a.Credentials(boxID)
	if err != nil {
		return classify(fmt.Errorf("derive agent credential: %w", err))
	}
	_, err = CallAgent(ctx, a.Sandbox, sandbox.SandboxRef{ID: sid, Token: token}, cred,
		func(ctx context.Context, conn *grpc.ClientConn) (struct{}, error) {
			return struct{}{}, call(ctx, agentvmv1.NewAgentsClient(conn))
		})
	if err != nil {
		return agentError(ctx, err)
	}
	return nil
}

// callStep dials the agent through the engine's ports relay and runs one Step.
func (a *Agent) callStep(ctx context.Context, ref sandbox.SandboxRef, cred string, req *agentvmv1.StepRequest) (*agentvmv1.StepResponse, error) {
	return CallAgent(ctx, a.Sandbox, ref, cred, func(ctx context.Context, conn *grpc.ClientConn) (*agentvmv1.StepResponse, error) {
		return agentvmv1.NewAgentsClient(conn).Step(ctx, req)
	})
}

// CallAgent makes one authenticated call to the box's agent through the engine's ports relay.
// When the relay could not reach the agent, the error wraps the relay's refusal (a sandbox
// sentinel) rather than gRPC's UNAVAILABLE; every other failure is the agent's gRPC status.
func CallAgent[T any](ctx context.Context, sb sandbox.Client, ref sandbox.SandboxRef, cred string, call func(context.Context, *grpc.ClientConn) (T, error)) (T, error) {
	var (
		mu      sync.Mutex
		dialErr error // the relay's last refusal, which says more than gRPC's UNAVAILABLE
		zero    T
	)
	conn, err := grpc.NewClient("passthrough:///agent",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			c, err := sb.DialPort(ctx, ref, AgentPort)
			if err != nil {
				mu.Lock()
				dialErr = err
				mu.Unlock()
				return nil, err
			}
			return c, nil
		}))
	if err != nil {
		return zero, fmt.Errorf("agent client: %w", err)
	}
	defer conn.Close()
	resp, err := call(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+cred), conn)
	mu.Lock()
	defer mu.Unlock()
	if err != nil && dialErr != nil && status.Code(err) == codes.Unavailable {
		return zero, fmt.Errorf("dial agent: %w", dialErr)
	}
	return resp, err
}

// agentError is the one table from the agent's answers to activity error types: a model or
// request the agent refuses is permanent and carries the agent's message; an agent that is not
// up yet, a transport failure or a relay that cannot reach the box is retried.
func agentError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	st, ok := status.FromError(err)
	if !ok {
		return sandboxError(err) // the relay's dial failed
	}
	msg := st.Message()
	switch st.Code() {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return newError(ErrTypeInvalidArgument, errors.New(msg))
	case codes.Unimplemented:
		return newError(ErrTypeInvalidArgument, fmt.Errorf("the box's agent cannot run steps: %s", msg))
	case codes.PermissionDenied:
		return newError(ErrTypeInvalidArgument, fmt.Errorf("agent refused: %s", msg))
	case codes.NotFound:
		return newError(ErrTypeNotFound, errors.New(msg))
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted,
		codes.Unauthenticated, codes.Canceled:
		// Unauthenticated: the agent has not read the credential file yet, or it was replaced.
		return newError(ErrTypeUnavailable, fmt.Errorf("agent: %s: %s", st.Code(), msg))
	}
	return newError(ErrTypeInternal, fmt.Errorf("agent: %s: %s", st.Code(), msg))
}

// sandboxError classifies an engine error on the way to the agent. A sandbox the engine no
// longer has is retried rather than permanent: the next try's wake brings the box a new one.
func sandboxError(err error) error {
	if errors.Is(err, sandbox.ErrNotFound) {
		return newError(ErrTypeUnavailable, err)
	}
	return classify(err)
}

// storeError classifies a store error: a missing row is permanent, the rest may be transient.
func storeError(err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return newError(ErrTypeNotFound, err)
	case errors.Is(err, store.ErrInvalid):
		return newError(ErrTypeInvalidArgument, err)
	case errors.Is(err, store.ErrConflict):
		return newError(ErrTypeConflict, err)
	}
	return classify(err)
}

func stepRow(in StepInput, resp *agentvmv1.StepResponse) store.NewAgentStep {
	p := store.StepPayload{Text: cut(resp.GetText(), maxStepText), Message: cut(in.Message, maxStepText),
		Done: resp.GetDone(), StopReason: resp.GetStopReason(), Replayed: resp.GetReplayed()}
	var names []string
	for _, tc := range resp.GetToolCalls() {
		p.ToolCalls = append(p.ToolCalls, store.StepToolCall{Name: tc.GetName(), IsError: tc.GetIsError(), Images: tc.GetImages(), Result: cut(tc.GetResult(), 1<<10)})
		names = append(names, tc.GetName())
	}
	payload, _ := json.Marshal(p) // plain strings and numbers: cannot fail
	return store.NewAgentStep{RunID: in.RunID, Step: in.Step, Kind: "model_turn",
		Summary: stepSummary(resp.GetText(), names), Payload: payload, Conversation: resp.GetMessages()}
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
