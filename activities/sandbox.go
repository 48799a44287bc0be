package activities

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// TokenStore keeps each box's sandbox token (encrypted at rest by its implementation) so that the
// token never enters a workflow payload: activities put it after a claim and read it back by box.
// The node that holds the sandbox (a redirected claim's, SandboxRef.Addr) is kept with it, so
// every later call on the sandbox goes there.
type TokenStore interface {
	// PutSandboxToken records the sandbox that now serves the box, with its token and node,
	// replacing any other.
	PutSandboxToken(ctx context.Context, boxID string, ref sandbox.SandboxRef) error
	// SandboxToken returns the box's current sandbox, with its token and node; a cocoonbox
	// ENotFound error when the box has none.
	SandboxToken(ctx context.Context, boxID string) (sandbox.SandboxRef, error)
}

// Sandbox holds the sandbox-engine activities of the box workflow.
type Sandbox struct {
	Client   sandbox.Client
	Tokens   TokenStore
	Template string // the template every box is claimed from, e.g. "base"
	// PollInterval is how often WaitReady probes the sandbox; 0 means half a second.
	PollInterval time.Duration
	// Credentials derives a box's agent credential (see boxlink.Credentials), which WaitReady writes
	// into the box so its agent, and every caller of it, is ready as soon as the box is; nil skips
	// the write.
	Credentials func(boxID cocoonbox.BoxID) (string, error)
	// Nodes lists the deployment's engine nodes (their workers' heartbeats); nil, or none
	// registered, claims on Client's own engine. With nodes, a claim goes to the node placement
	// picks (nodes.Pick), and the box's calls follow it there (SandboxRef.Addr).
	Nodes func(ctx context.Context) ([]nodes.Node, error)
	// NodeDeadAfter is how long a node's heartbeat may be silent and the node still take boxes;
	// 0 is nodes.DefaultDeadAfter.
	NodeDeadAfter time.Duration
	// Placed counts a box of mib MiB just claimed on node into the node's record, so the next
	// placement sees it before the node's next heartbeat; nil counts nothing.
	Placed func(ctx context.Context, node string, mib int64) error
	// Rows writes box rows, for the calls that record a state beside an engine call
	// (HibernateRecorded).
	Rows *Store
	// Node is the ID of the registered node whose engine Client's own is (`serve worker --node`,
	// `local` in `cocoonbox dev`); empty when none is. A sandbox claimed there is recorded as on
	// that node, since "the configured engine" is a different one to each worker of a deployment
	// with several nodes.
	Node string
}

// ClaimInput asks for a sandbox for a box. Attempt numbers the box's claims, so that a retried
// activity adopts the sandbox its lost answer made while a deliberate new claim gets a new one.
type ClaimInput struct {
	BoxID   cocoonbox.BoxID
	Size    cocoonbox.Size
	Attempt int
	TTL     time.Duration     // the lease; 0 is the engine's default
	Network cocoonbox.Network // the box's egress policy; zero is none
	// Record, when set, is the box row to create (RecordBox) while the engine claims: every try
	// of a create's claim writes it, the first in the same local activity, a hop through the
	// worker fewer.
	Record *RecordBoxInput `json:",omitempty"`
}

// ClaimResult names the claimed sandbox; its token went to the TokenStore.
type ClaimResult struct {
	SandboxID string
	Deadline  time.Time
	Adopted   bool // an earlier attempt's sandbox was found under the claim_ref and kept
	// Start is how the engine served the claim: sandbox.StartWarm, StartCold, or "" unsaid.
	Start string
	// Node is the registered node that holds the sandbox; "" when no record names its engine.
	Node string
}

// SandboxInput names the box's sandbox for the single-sandbox verbs.
type SandboxInput struct {
	BoxID     cocoonbox.BoxID
	SandboxID string
}

// RenewInput asks to extend a sandbox's lease to TTL from now (0: the engine's default).
type RenewInput struct {
	BoxID     cocoonbox.BoxID
	SandboxID string
	TTL       time.Duration
}

// RenewResult is the lease the engine granted, which may be clamped.
type RenewResult struct {
	Deadline time.Time
}

// ClaimRef is the claim_ref of a box's attempt-th claim.
func ClaimRef(boxID cocoonbox.BoxID, attempt int) string {
	return fmt.Sprintf("%s/%d", boxID, attempt)
}

// ClaimRefBox is the box a claim_ref made by ClaimRef names; false for any other reference (a
// claim another control plane made on a shared engine, or none).
func ClaimRefBox(ref string) (cocoonbox.BoxID, bool) {
	box, attempt, ok := strings.Cut(ref, "/")
	if !ok || cocoonbox.BoxID(box).Validate() != nil {
		return "", false
	}
	if n, err := strconv.Atoi(attempt); err != nil || n < 1 {
		return "", false
	}
	return cocoonbox.BoxID(box), true
}

// Claim gets a sandbox for the box, adopting the one an earlier try of the same attempt made, and
// stores its token.
func (a *Sandbox) Claim(ctx context.Context, in ClaimInput) (ClaimResult, error) {
	if err := in.BoxID.Validate(); err != nil {
		return ClaimResult{}, classify(err)
	}
	if in.Attempt < 1 {
		return ClaimResult{}, classify(cocoonbox.Invalid("attempt", "must be at least 1"))
	}
	size := in.Size
	if size == "" {
		size = cocoonbox.DefaultSize
	}
	req := sandbox.ClaimRequest{
		Template:   a.Template,
		Net:        lane(in.Network),
		Egress:     egressPolicy(in.Network),
		Size:       string(size),
		TTLSeconds: int(in.TTL / time.Second),
		ClaimRef:   ClaimRef(in.BoxID, in.Attempt),
	}
	recorded := make(chan error, 1)
	if in.Record != nil {
		go func() { recorded <- a.record(ctx, *in.Record) }()
	} else {
		recorded <- nil
	}
	got, err := whileHeartbeating(ctx, func(ctx context.Context) (sandbox.Claimed, error) {
		return a.claimPlaced(ctx, req)
	})
	// The row first: a claim that fails with it fails as the row's write (the next try adopts
	// the sandbox by its claim_ref).
	if rerr := <-recorded; rerr != nil {
		return ClaimResult{}, rerr
	}
	if err != nil {
		return ClaimResult{}, finalClaim(ctx, classify(fmt.Errorf("claim sandbox: %w", err)))
	}
	// Stored before answering: a sandbox the workflow learns of must have a token to act with. A
	// failure here retries the activity, which adopts the same sandbox by its claim_ref.
	if err := a.Tokens.PutSandboxToken(ctx, string(in.BoxID), got.SandboxRef); err != nil {
		return ClaimResult{}, classify(fmt.Errorf("store sandbox token: %w", err))
	}
	return ClaimResult{SandboxID: got.ID, Deadline: got.Deadline, Adopted: got.Adopted, Start: got.Start, Node: got.Node}, nil
}

// claimPlaced claims req on the node placement picks when the deployment has registered nodes,
// after looking on every other one for a sandbox an earlier try made under the same claim_ref
// (placement may have changed its mind since), else on Client's own engine.
func (a *Sandbox) claimPlaced(ctx context.Context, req sandbox.ClaimRequest) (sandbox.Claimed, error) {
	nc, ok := a.Client.(sandbox.NodeClaimer)
	if a.Nodes == nil || !ok {
		got, err := a.Client.Claim(ctx, req)
		return onNode(got, a.Node, ""), err
	}
	all, err := a.Nodes(ctx)
	if err != nil {
		return sandbox.Claimed{}, fmt.Errorf("list engine nodes: %w", err)
	}
	if len(all) == 0 {
		got, err := a.Client.Claim(ctx, req)
		return onNode(got, a.Node, ""), err
	}
	n, refused := placement(all, nodes.Request{Template: req.Template, Size: cocoonbox.Size(req.Size), Net: req.Net}, a.NodeDeadAfter, a.Node)
	for _, other := range all {
		if other.ID == n.ID || other.State == nodes.Lost {
			continue
		}
		got, found, err := nc.Adopt(ctx, other.URL, req.ClaimRef)
		if err != nil {
			return sandbox.Claimed{}, fmt.Errorf("look for an earlier claim on node %s: %w", other.ID, err)
		}
		if found {
			return onNode(got, other.ID, other.URL), nil
		}
	}
	if refused != nil {
		return sandbox.Claimed{}, refused
	}
	got, err := nc.ClaimOn(ctx, n.URL, req) // an empty URL is Client's own engine
	if n.ID == "" {
		got = onNode(got, a.Node, "")
	} else {
		got = onNode(got, n.ID, n.URL)
	}
	if err == nil && !got.Adopted {
		notePlaced(ctx, a.Placed, got.Node, cocoonbox.Size(req.Size))
	}
	return got, err
}

// notePlaced counts a new box of size on node through placed, if both are known; a failure is
// only logged, since the node's next heartbeat has the engine's own count anyway.
func notePlaced(ctx context.Context, placed func(context.Context, string, int64) error, node string, size cocoonbox.Size) {
	if placed == nil || node == "" {
		return
	}
	if err := placed(ctx, node, int64(size.Spec().MemoryMB)); err != nil {
		logger(ctx).Warn("count a placed box into its node's record", "node", node, "error", err)
	}
}

// ownNode is the record of node id among all; the zero Node when there is none.
func ownNode(all []nodes.Node, id string) nodes.Node {
	for _, n := range all {
		if id != "" && n.ID == id {
			return n
		}
	}
	return nodes.Node{}
}

// onNode records that got's sandbox is on the registered node id, whose address is url (empty:
// Client's own engine): the sandbox is then reached at the address the node's record has at the
// time, so a node whose address changes keeps its boxes. A sandbox a redirect sent to another
// engine keeps that engine's address and no node.
func onNode(got sandbox.Claimed, id, url string) sandbox.Claimed {
	if id != "" && (got.Addr == "" || url != "" && sameEngine(got.Addr, url)) {
		got.Addr, got.Node = "", id
	}
	return got
}

// failed classifies the failure of verb on sandbox ref: SandboxGone when the engine does not have
// it or the node that held it is lost (lostNode), else by its kind.
func (a *Sandbox) failed(ctx context.Context, verb string, ref sandbox.SandboxRef, err error) error {
	if errors.Is(err, sandbox.ErrNotFound) {
		return gone(fmt.Errorf("%s sandbox %s: %w", verb, ref.ID, err))
	}
	if lost := a.lostNode(ctx, ref); lost != "" {
		return gone(fmt.Errorf("%s sandbox %s: node %s that held it is lost: %w", verb, ref.ID, lost, err))
	}
	return classify(fmt.Errorf("%s sandbox %s: %w", verb, ref.ID, err))
}

// lostNode is the ID of the node that holds ref's sandbox when the heartbeats marked it lost, so
// a call that fails there need not be retried: the sandbox went with its node, and the box comes
// back elsewhere from its newest snapshot, as from a reaped lease. Empty for a sandbox on Client's
// own engine or on a node not known lost (its failure may pass).
func (a *Sandbox) lostNode(ctx context.Context, ref sandbox.SandboxRef) string {
	if ref.Node == "" && ref.Addr == "" || a.Nodes == nil {
		return ""
	}
	all, err := a.Nodes(ctx)
	if err != nil {
		return ""
	}
	for _, n := range all {
		// A sandbox recorded before nodes were named has only its node's address.
		holds := n.ID == ref.Node || ref.Node == "" && sameEngine(n.URL, ref.Addr)
		if n.State == nodes.Lost && holds {
			return n.ID
		}
	}
	return ""
}

// sameEngine reports whether two engine addresses (http(s) origins or host:port) name one engine.
func sameEngine(a, b string) bool {
	host := func(s string) string {
		if u, err := url.Parse(s); err == nil && u.Host != "" {
			return u.Host
		}
		return s
	}
	return host(a) == host(b)
}

// finalClaim makes a claim's refusal final when the server could not fit another try in the
// activity's ScheduleToClose time (a create's create_wait), so the workflow learns why ("no
// capacity: a small box needs 512 MiB ..."): left to the server, an activity that runs out of
// that time between tries fails with only "not enough time to schedule next retry". Each try
// still fails on its own, so the box says what it waits for meanwhile.
func finalClaim(ctx context.Context, err error) error {
	app, ok := errors.AsType[*temporal.ApplicationError](err)
	if !ok || app.NonRetryable() || !activity.IsActivity(ctx) || !lastTry(activity.GetInfo(ctx), time.Now()) {
		return err
	}
	return temporal.NewNonRetryableApplicationError(app.Message(), app.Type(), errors.Unwrap(app))
}

// lastTry reports whether the next try of the activity would start after its ScheduleToClose
// deadline. The wait before it is the workflows' retry policy's (workflows.retryPolicy): 1 s
// after the first try, doubling, at most 30 s. A local activity's try is never the last: it is
// the box workflow's quick try (workflows.quickly), whose ScheduleToClose is its own few
// seconds, and the activity that follows it owns the create's wait.
func lastTry(info activity.Info, now time.Time) bool {
	if info.ScheduleToCloseTimeout <= 0 || info.IsLocalActivity {
		return false
	}
	next := min(time.Second<<min(max(info.Attempt-1, 0), 5), 30*time.Second)
	return now.Add(next).After(info.ScheduledTime.Add(info.ScheduleToCloseTimeout))
}

// WaitReady probes the sandbox until it answers, heartbeating between probes so a dead worker is
// noticed by the HeartbeatTimeout rather than the whole StartToCloseTimeout. With Credentials
// set, the probe is the exec that writes the box's agent credential into it: a fresh claim, a
// restore and a new sandbox after a lost one all pass here. The write needs only the engine's
// exec, so a box whose image has no agent is ready all the same; without Credentials the probe
// is `true`.
func (a *Sandbox) WaitReady(ctx context.Context, in SandboxInput) error {
	ref, err := a.ref(ctx, in.BoxID, in.SandboxID)
	if err != nil {
		return err
	}
	return readyWithCredential(ctx, a.Client, ref, a.PollInterval, in.BoxID, a.Credentials)
}

// readyWithCredential waits until the sandbox answers, then writes the box's agent credential
// into it when creds is set: every sandbox that becomes a box's (a claim, a rebuild, a restore)
// passes here, so the control plane's calls to the agent find it. With creds, the credential's
// exec is the probe: one exec where a probe and a write took two, on every create and wake.
func readyWithCredential(ctx context.Context, client sandbox.Client, ref sandbox.SandboxRef, every time.Duration,
	boxID cocoonbox.BoxID, creds func(cocoonbox.BoxID) (string, error)) error {
	if creds == nil {
		return waitReady(ctx, client, ref, every, sandbox.ExecRequest{Argv: []string{"true"}, TimeoutSeconds: 10}, nil)
	}
	cred, err := creds(boxID)
	if err != nil {
		return classify(fmt.Errorf("derive agent credential: %w", err))
	}
	err = waitReady(ctx, client, ref, every, boxlink.CredentialExec(cred), boxlink.CredentialResult)
	if boxlink.OlderInit(err) {
		// An image older than the init's credential command: the shell writes it.
		err = waitReady(ctx, client, ref, every, boxlink.CredentialScriptExec(cred), boxlink.CredentialResult)
	}
	return err
}

// waitReady runs probe in sandbox ref every interval (0: half a second) until the engine runs it.
// A run that exits non-zero is tried again, unless check turns it into an error.
func waitReady(ctx context.Context, client sandbox.Client, ref sandbox.SandboxRef, every time.Duration,
	probe sandbox.ExecRequest, check func(sandbox.ExecResult) error) error {
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	for n := 1; ; n++ {
		res, err := client.Exec(ctx, ref, probe)
		switch {
		case err == nil && res.ExitCode == 0:
			return nil
		case err == nil && check != nil:
			return classify(check(res))
		case errors.Is(err, sandbox.ErrNotFound):
			return gone(fmt.Errorf("wait for sandbox %s: %w", ref.ID, err))
		case err != nil && !transient(err):
			return classify(fmt.Errorf("wait for sandbox %s: %w", ref.ID, err))
		}
		activity.RecordHeartbeat(ctx, n)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// transient reports whether a probe failure means "not ready yet" rather than "broken".
func transient(err error) bool {
	return errors.Is(err, sandbox.ErrUnavailable) || errors.Is(err, sandbox.ErrTimeout) ||
		errors.Is(err, sandbox.ErrInternal) || sandbox.StatusCode(err) == 0 && ctxAlive(err)
}

// ctxAlive is true for transport errors (no engine answer), which are worth another probe.
func ctxAlive(err error) bool {
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// Hibernate frees the sandbox's CPU and memory, keeping its state.
func (a *Sandbox) Hibernate(ctx context.Context, in SandboxInput) error {
	return a.onSandbox(ctx, in, "hibernate", a.Client.Hibernate)
}

// Wake brings the hibernated sandbox back. SandboxGone means the engine no longer has it.
func (a *Sandbox) Wake(ctx context.Context, in SandboxInput) error {
	return a.onSandbox(ctx, in, "wake", a.Client.Wake)
}

// Renew extends the sandbox's lease.
func (a *Sandbox) Renew(ctx context.Context, in RenewInput) (RenewResult, error) {
	ref, err := a.ref(ctx, in.BoxID, in.SandboxID)
	if err != nil {
		return RenewResult{}, err
	}
	deadline, err := a.Client.Renew(ctx, ref, in.TTL)
	if err != nil {
		return RenewResult{}, a.failed(ctx, "renew", ref, err)
	}
	return RenewResult{Deadline: deadline}, nil
}

// Release destroys the sandbox; one that is already gone is released.
func (a *Sandbox) Release(ctx context.Context, in SandboxInput) error {
	if in.SandboxID == "" {
		return nil
	}
	ref, err := a.ref(ctx, in.BoxID, in.SandboxID)
	if err != nil {
		return err
	}
	if err := a.Client.Release(ctx, ref); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return classify(fmt.Errorf("release sandbox %s: %w", in.SandboxID, err))
	}
	return nil
}

func (a *Sandbox) onSandbox(ctx context.Context, in SandboxInput, verb string, call func(context.Context, sandbox.SandboxRef) error) error {
	ref, err := a.ref(ctx, in.BoxID, in.SandboxID)
	if err != nil {
		return err
	}
	return a.call(ctx, ref, verb, call)
}

// call makes an engine call on the sandbox ref names, heartbeating while it lasts.
func (a *Sandbox) call(ctx context.Context, ref sandbox.SandboxRef, verb string, call func(context.Context, sandbox.SandboxRef) error) error {
	_, err := whileHeartbeating(ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, call(ctx, ref) })
	if err != nil {
		return a.failed(ctx, verb, ref, err)
	}
	return nil
}

// ref builds the reference to act on a box's sandbox with its own token. When the token store
// has no token for that sandbox (lost, or a newer claim replaced it) the ref carries none and the
// client falls back to its node token, which the engine accepts from root for these verbs.
func (a *Sandbox) ref(ctx context.Context, boxID cocoonbox.BoxID, sandboxID string) (sandbox.SandboxRef, error) {
	return sandboxRef(ctx, a.Tokens, boxID, sandboxID)
}

func sandboxRef(ctx context.Context, tokens TokenStore, boxID cocoonbox.BoxID, sandboxID string) (sandbox.SandboxRef, error) {
	if sandboxID == "" {
		return sandbox.SandboxRef{}, classify(cocoonbox.Invalid("sandbox_id", "is required"))
	}
	ref, err := tokens.SandboxToken(ctx, string(boxID))
	switch {
	case cocoonbox.ErrorCode(err) == cocoonbox.ENotFound:
		return sandbox.SandboxRef{ID: sandboxID}, nil
	case err != nil:
		return sandbox.SandboxRef{}, classify(fmt.Errorf("read sandbox token: %w", err))
	case ref.ID != sandboxID:
		return sandbox.SandboxRef{ID: sandboxID}, nil
	}
	return ref, nil
}
