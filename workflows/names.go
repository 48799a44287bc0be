package workflows

import (
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
)

// TaskQueue is the queue every cocoonbox workflow and activity runs on, but for the node-local
// work of NodeTaskQueue.
const TaskQueue = "cocoonbox"

// NodeTaskQueue is the queue of engine node id's own worker (serve worker --node): a box's
// snapshot is exported there, beside the engine that holds the box, and a restore placed on the
// node is imported there, so either stream goes between the node and S3 alone.
func NodeTaskQueue(node string) string { return "cocoonbox.node." + node }

// BoxWorkflowID is the workflow ID of a box's entity workflow, so any caller can address it.
func BoxWorkflowID(id cocoonbox.BoxID) string { return "box/" + string(id) }

// Message names of the box workflow. They are part of the wire contract with clients: never
// rename one, add a new name instead.
const (
	UpdateCreate    = "create"
	UpdateWake      = "wake"
	UpdateHibernate = "hibernate"
	UpdateDelete    = "delete"
	UpdateSetPolicy = "setpolicy"
	UpdateSnapshot  = "snapshot"
	UpdateRestore   = "restore"
	UpdateTakeOver  = "takeover"
	UpdateHandBack  = "handback"
	// UpdateSetNetwork replaces the box's egress policy within its lane: internet and allow-lists
	// (a NIC) change into each other at once; none (no NIC) is fixed at create.
	UpdateSetNetwork = "setnetwork"
	// UpdateRecreate starts a box whose sandbox was lost with no snapshot again, from its
	// template: the owner's choice, never made for them.
	UpdateRecreate = "recreate"
	// UpdateMove moves the box off an engine node an operator drains (MoveInput): a running box
	// at once, a hibernated one on its next wake.
	UpdateMove = "move"
	// UpdateControlConn takes the box's one control connection slot for an edge's connection,
	// whichever API replica serves it; SignalControlClosed gives it back.
	UpdateControlConn   = "control-connection"
	SignalControlClosed = "control-closed"
	// UpdateFork checkpoints the box with its memory for new boxes to be claimed from
	// (ForkInput, ForkResult); each fork's workflow sends SignalForkClaimed once it has its
	// sandbox, so the checkpoint goes as soon as no fork needs it.
	UpdateFork        = "fork"
	SignalForkClaimed = "fork-claimed"
	// SignalSandboxLost says the node that held the box's sandbox is lost (SandboxLostSignal).
	SignalSandboxLost = "sandbox-lost"
	SignalTouch       = "touch"
	SignalViewers     = "viewers"
	SignalPin         = "pin"
	SignalUnpin       = "unpin"
	QueryStatus       = "status"
)

// SnapshotWorkflowID is the workflow ID of the child workflow that takes snapshot id.
func SnapshotWorkflowID(id string) string { return "snapshot/" + id }

// Search attributes the box workflow keeps current so operators can filter in the Temporal UI:
// Owner is the owner's user ID, OwnerName their name (operators know users by name).
var (
	SearchAttrOwner     = temporal.NewSearchAttributeKeyKeyword("Owner")
	SearchAttrOwnerName = temporal.NewSearchAttributeKeyKeyword("OwnerName")
	SearchAttrBoxState  = temporal.NewSearchAttributeKeyKeyword("BoxState")
	SearchAttrBoxName   = temporal.NewSearchAttributeKeyKeyword("BoxName")
)

// SearchAttributes are the box workflows' custom search attributes and their types: the
// embedded server registers them at start; a worker on a cluster refuses to start while one is
// missing (an upsert of an unregistered attribute fails every workflow task of the box).
var SearchAttributes = map[string]enumspb.IndexedValueType{
	SearchAttrOwner.GetName():     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	SearchAttrOwnerName.GetName(): enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	SearchAttrBoxState.GetName():  enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	SearchAttrBoxName.GetName():   enumspb.INDEXED_VALUE_TYPE_KEYWORD,
}

// ErrTypeInvalidTransition is the ApplicationError type a validator answers when a message does
// not apply to the box's current state; nothing is written to history for it.
const ErrTypeInvalidTransition = "InvalidTransition"

// DefaultOpsBeforeContinue is how many operations one run serves before continuing as new, well
// under the server's 2,000 updates per run.
const DefaultOpsBeforeContinue = 200

// DefaultLeaseIdle is how long the desktop's control lease stays with a holder who has no control
// connection open, when the box's policy does not say (Policy.LeaseIdle).
const DefaultLeaseIdle = 2 * time.Minute

// DefaultKeepSnapshots is how many complete snapshots a box keeps when its policy does not say;
// pinned ones are kept besides.
const DefaultKeepSnapshots = 5

// Policy is how a box behaves on its own.
type Policy struct {
	// IdleAfter is how long a box with no viewer, no pin, no operation and no touch stays running
	// before it hibernates; 0 never hibernates it by itself.
	IdleAfter time.Duration
	// LeaseTTL is the sandbox lease asked for at claim and renewal; 0 is the engine's default.
	LeaseTTL time.Duration
	// DurableHibernate takes a snapshot before every hibernate, so a box whose node is lost
	// while it sleeps comes back from S3 with everything it had.
	DurableHibernate bool
	// KeepSnapshots is how many complete snapshots retention keeps (plus pinned ones); 0 is
	// DefaultKeepSnapshots. The newest complete snapshot is never deleted.
	KeepSnapshots int
	// SnapshotEvery seals a running box into a snapshot this long after its last one, when it
	// was active since; 0 never does it by itself.
	SnapshotEvery time.Duration
	// Network is the box's egress policy, fixed at create: every sandbox the box gets (a claim, a
	// restore) has it. Zero is none.
	Network cocoonbox.Network
	// LeaseIdle is how long the desktop's control lease stays with a holder who has no control
	// connection open (taking the lease counts as having one) before the box releases it, so a
	// lease nobody uses never keeps the agent's runs waiting; 0 is DefaultLeaseIdle.
	LeaseIdle time.Duration
	// RecordRuns records the desktop of every agent run on the box, as a run's --record does.
	RecordRuns bool `json:",omitempty"`
}

// BoxWorkflowInput starts (or continues) a box's entity workflow.
type BoxWorkflowInput struct {
	BoxID cocoonbox.BoxID
	Owner string
	// OwnerName is the owner's user name, for the OwnerName search attribute; empty in boxes
	// created before it, which carry Owner alone.
	OwnerName string `json:",omitempty"`
	Name      string
	Size      cocoonbox.Size
	Policy    Policy
	// OpsBeforeContinue overrides DefaultOpsBeforeContinue (tests lower it); 0 is the default.
	OpsBeforeContinue int
	// CreateWait bounds how long the create waits for the engine to hand out a sandbox (an
	// image not built, no capacity) before the box fails with the reason; 0 is
	// DefaultCreateWait.
	CreateWait time.Duration
	// Fork says the box is a fork: its create claims its sandbox from the parent's checkpoint
	// with memory instead of from the template. Nil for a box created afresh.
	Fork *ForkOrigin `json:",omitempty"`
	// State is the compact state a previous run carried over; nil on the first run.
	State *BoxCarriedState
}

// ForkOrigin is where a fork comes from: its parent box and the checkpoint the parent's fork
// update took, on the parent's node.
type ForkOrigin struct {
	Parent       cocoonbox.BoxID
	CheckpointID string
	Node         string `json:",omitempty"`
	At           time.Time
}

// ForkInput is the fork update's argument: how many boxes will be claimed from the checkpoint,
// and the fork's ID, which names the checkpoint so a retried activity finds the one it made.
type ForkInput struct {
	ForkID string
	Count  int
	By     string `json:",omitempty"` // who asked, for the box's events
}

// ForkResult is the fork update's answer.
type ForkResult struct {
	Status       Status
	CheckpointID string
	Node         string `json:",omitempty"`
	At           time.Time
	// Paused is how long the box was paused for the copy (zero for a hibernated box).
	Paused time.Duration
}

// ForkClaimedSignal tells a box that one of its forks claimed its sandbox from CheckpointID (or
// gave up on it).
type ForkClaimedSignal struct {
	CheckpointID string
}

// ForkCheckpoint is a checkpoint a fork update took, kept until Pending forks have claimed from
// it or Until, whichever is first.
type ForkCheckpoint struct {
	ID      string
	Node    string `json:",omitempty"`
	Pending int
	Until   time.Time
}

// MaxForks bounds the forks of one fork update.
const MaxForks = 8

// BoxCarriedState is what one run of the box workflow hands the next on continue-as-new. It holds
// references only, never secrets or bytes.
type BoxCarriedState struct {
	State      cocoonbox.BoxState
	SandboxID  string
	Deadline   time.Time      // the sandbox lease's end
	NextRenew  time.Time      // when to renew the lease; zero means not scheduled
	Attempt    int            // claims made so far; the next claim uses Attempt+1 in its claim_ref
	Viewers    int            // the count reported without a source (older APIs)
	ViewersBy  []ViewerReport // counts by reporting API process, sorted by source
	Pins       []string       // sorted, so the state is deterministic
	Runs       []string       // the agent runs among Pins, sorted: they are told of lease changes
	LastError  string
	LastActive time.Time // the last touch, operation or presence change, for the idle clock
	// LastSnapshot is the newest snapshot this workflow completed or restored from.
	LastSnapshot string
	// Controller is the user who holds the desktop's control lease; "" when nobody does (the
	// agent may drive).
	Controller string
	// LeaseSeq counts the lease's changes of hands. It orders what a box's agent is told of the
	// lease by two paths (a step's request, read when the step starts, and a run's word while a
	// step runs), which may arrive in either order.
	LeaseSeq int64
	// Seal is the box's background snapshots (durable hibernate and SnapshotEvery).
	Seal SealState
	// RestoredFrom is the snapshot the box's sandbox was last rebuilt from after the engine
	// lost the one before; zero when it never was.
	RestoredFrom RestoredFrom
	// IdleWarned is the idle deadline the last idle_warning announced, so each is said once.
	IdleWarned time.Time
	// Start is how the engine served the box's last claim from the template: "warm" (a box of a
	// warm pool), "cold" (booted for it), "" when it did not say.
	Start string
	// ControlSeen is when the lease's holder last had a control connection open, or took the
	// lease: the lease idle clock (Policy.LeaseIdle) counts from it while no control connection
	// is open. Zero while nobody holds the lease, and for a lease taken before the clock existed
	// until the next viewer report.
	ControlSeen time.Time
	// ControlConn is the control connection that holds the desktop's one control slot, if any.
	ControlConn ControlConn `json:",omitzero"`
	// MoveFrom is the draining node a hibernated box leaves on its next wake; "" when none.
	MoveFrom string `json:",omitempty"`
	// Node is the registered node that holds the box's sandbox, as its claim or restore said;
	// "" when none is named (or the claim predates the field).
	Node string `json:",omitempty"`
	// Forks are the checkpoints of fork updates still kept for their forks.
	Forks []ForkCheckpoint `json:",omitempty"`
}

// ControlConn is a control connection of the desktop: its ID, the API process (a viewer report
// source) that serves it, and when it took the slot.
type ControlConn struct {
	ID     string
	Source string
	At     time.Time
}

// ControlConnInput asks for the control slot for connection ID, served by API process Source.
type ControlConnInput struct {
	ID     string
	Source string
}

// SandboxLostSignal names a sandbox whose node the heartbeats marked lost.
type SandboxLostSignal struct {
	SandboxID string
	Node      string
}

// ControlClosedSignal says control connection ID has closed.
type ControlClosedSignal struct {
	ID string
}

// DefaultCreateWait is BoxWorkflowInput.CreateWait when zero.
const DefaultCreateWait = 10 * time.Minute

// MaxIdleWarning bounds how long before an idle hibernate the box says it is coming (an
// idle_warning event): a quarter of the idle period, at most this.
const MaxIdleWarning = 2 * time.Minute

// SealState is where a box's background snapshots stand. A seal runs as a child workflow
// beside the box's operations, one at a time; it carries over continue-as-new only when none
// runs (the box waits for it first).
type SealState struct {
	Running string    // the snapshot ID being taken; "" when none
	Again   bool      // another seal was asked for while one ran: it starts when that ends
	Sealed  bool      // the newest seal was taken while the box slept, and it has not woken since
	Last    time.Time // when the newest seal started (or the box first ran), for SnapshotEvery
	// Failures counts the seals that failed in a row; RetryAt is when the next is tried, with a
	// backoff from SealRetryFirst to SealRetryMax, so a box whose object store was down heals
	// when it comes back.
	Failures int
	RetryAt  time.Time
	// Awake: the box's snapshots go through its agent (an engine without disk export), which
	// needs the box running, so a durable hibernate seals before the box sleeps, not after.
	Awake bool
}

// The backoff of a failed seal's retries.
const (
	SealRetryFirst = 2 * time.Minute
	SealRetryMax   = time.Hour
)

// RestoredFrom names the snapshot a lost sandbox was rebuilt from.
type RestoredFrom struct {
	SnapshotID string
	TakenAt    time.Time // when the snapshot was taken
	At         time.Time // when the box was rebuilt from it
}

// CreateInput is the create update's argument (sent with Update-with-Start).
type CreateInput struct{}

// WakeInput is the wake update's argument.
type WakeInput struct {
	// Reason says why the box wakes, for its events: "requested by alice", "agent run run_…".
	Reason string `json:",omitempty"`
}

// HibernateInput is the hibernate update's argument.
type HibernateInput struct {
	// By names who asked, for the box's events.
	By string `json:",omitempty"`
}

// DeleteInput is the delete update's argument.
type DeleteInput struct {
	// PurgeSnapshots deletes the box's snapshots (objects and rows) too; without it they stay
	// listed and restorable by an operator.
	PurgeSnapshots bool
}

// SetPolicyInput is the setpolicy update's argument: the fields it sets, the others staying as
// they are (an input from before the fields could be left out sets all of them).
type SetPolicyInput struct {
	IdleAfter        *time.Duration `json:",omitempty"`
	LeaseTTL         *time.Duration `json:",omitempty"`
	DurableHibernate *bool          `json:",omitempty"`
	KeepSnapshots    *int           `json:",omitempty"`
	SnapshotEvery    *time.Duration `json:",omitempty"`
	LeaseIdle        *time.Duration `json:",omitempty"`
	RecordRuns       *bool          `json:",omitempty"`
}

// ApplyTo sets the fields of p that in carries.
func (in SetPolicyInput) ApplyTo(p *Policy) {
	set := func(to *time.Duration, v *time.Duration) {
		if v != nil {
			*to = *v
		}
	}
	set(&p.IdleAfter, in.IdleAfter)
	set(&p.LeaseTTL, in.LeaseTTL)
	set(&p.SnapshotEvery, in.SnapshotEvery)
	set(&p.LeaseIdle, in.LeaseIdle)
	if in.DurableHibernate != nil {
		p.DurableHibernate = *in.DurableHibernate
	}
	if in.KeepSnapshots != nil {
		p.KeepSnapshots = *in.KeepSnapshots
	}
	if in.RecordRuns != nil {
		p.RecordRuns = *in.RecordRuns
	}
}

// SetAll is the input that sets every field of the policy to p's (but its network).
func SetAll(p Policy) SetPolicyInput {
	return SetPolicyInput{IdleAfter: &p.IdleAfter, LeaseTTL: &p.LeaseTTL, DurableHibernate: &p.DurableHibernate,
		KeepSnapshots: &p.KeepSnapshots, SnapshotEvery: &p.SnapshotEvery, LeaseIdle: &p.LeaseIdle, RecordRuns: &p.RecordRuns}
}

// RecreateInput is the recreate update's argument.
type RecreateInput struct{}

// SnapshotInput is the snapshot update's argument.
type SnapshotInput struct{}

// SnapshotResult is the snapshot update's answer: the complete, verified snapshot, the
// snapshots retention removed to make room, and the box's status after.
type SnapshotResult struct {
	Snapshot cocoonbox.Snapshot
	Pruned   []string
	Status   Status
}

// SetNetworkInput is the setnetwork update's argument.
type SetNetworkInput struct {
	Network cocoonbox.Network
}

// TakeOverInput asks for the desktop's control lease for User. Without Force it is refused
// while someone else holds it; Force (owner or admin) takes it from them.
type TakeOverInput struct {
	User  string
	Force bool
}

// HandBackInput gives the control lease back. Only its holder may, unless Force (owner or admin).
type HandBackInput struct {
	User  string
	Force bool
}

// RestoreInput is the restore update's argument.
type RestoreInput struct {
	// SnapshotID is the snapshot to restore; "" is the box's newest complete one.
	SnapshotID string
}

// SnapshotWorkflowInput starts the child workflow that snapshots a box's sandbox.
type SnapshotWorkflowInput struct {
	BoxID      cocoonbox.BoxID
	SnapshotID string
	SandboxID  string
	// Node is the node that holds the sandbox, whose own worker exports it (NodeTaskQueue); ""
	// exports it from any worker.
	Node string `json:",omitempty"`
	// Keep is the retention applied after the snapshot completes (see Policy.KeepSnapshots).
	Keep int
}

// SnapshotWorkflowResult is the snapshot workflow's result.
type SnapshotWorkflowResult struct {
	Snapshot cocoonbox.Snapshot
	Pruned   []string
}

// ViewersSignal reports how many desktop viewers are attached now through one API process.
type ViewersSignal struct {
	Count int
	// Source names the reporting API process: the box's viewers are the sum of every source's
	// newest count. A source reports again at least every ViewersReportEvery while it has
	// viewers, and a report older than ViewersReportTTL no longer counts, so viewers of an API
	// process that died do not keep the box awake. "" (APIs before sources) replaces a count of
	// its own that never expires, until the first report with a source ends it.
	Source string
	// Control is how many of Count are in control mode: they keep the control lease's idle
	// clock (Policy.LeaseIdle) stopped. A count without a source has none.
	Control int
}

// How often an API process repeats its viewer counts, and how long a count holds without one.
const (
	ViewersReportEvery = 3 * time.Minute
	ViewersReportTTL   = 10 * time.Minute
)

// ViewerReport is a source's newest viewer count and when it came.
type ViewerReport struct {
	Source  string
	Count   int
	Control int // of Count, in control mode
	At      time.Time
}

// PinSignal pins (or, on the unpin signal, unpins) the box awake on behalf of Ref, e.g. a run ID.
type PinSignal struct {
	Ref string
	Run bool // Ref is an agent run pinning the box for its steps: it is told of lease changes
}

// Status is what the status query and every update answer.
type Status struct {
	BoxID     cocoonbox.BoxID
	State     cocoonbox.BoxState
	SandboxID string
	Deadline  time.Time // the sandbox lease's end
	Viewers   int
	Pins      []string
	LastError string
	// IdleDeadline is when the box hibernates if nothing happens; zero when idle is not counting.
	IdleDeadline time.Time
	Policy       Policy
	// LastSnapshot is the newest snapshot the box took or was restored from; "" before any.
	LastSnapshot string
	// Controller holds the desktop's control lease; "" when nobody does.
	Controller string
	// LeaseSeq counts the control lease's changes of hands (BoxCarriedState.LeaseSeq).
	LeaseSeq int64
	// Seal is SealSealing while a background snapshot runs, SealSealed when the sleeping box's
	// disk is in a verified snapshot, and "" otherwise.
	Seal string
	// RestoredFrom names the snapshot the box was rebuilt from when the engine lost its sandbox.
	RestoredFrom RestoredFrom
	// Start is how the box's last claim from the template was served (BoxCarriedState.Start).
	Start string
}

// Seal words of Status.Seal.
const (
	SealSealing = "sealing"
	SealSealed  = "sealed"
)

// RunIDPrefix starts every agent run ID; the box workflow knows a run's pin by it.
const RunIDPrefix = "run_"

// AgentRunWorkflowID is the workflow ID of agent run id's workflow.
func AgentRunWorkflowID(id string) string { return "run/" + id }

// Message names of the agent run workflow; wire contract like the box workflow's.
const (
	SignalRunMessage = "message"
	SignalRunCancel  = "cancel"
	SignalRunLease   = "lease" // the desktop's control lease changed hands (RunLeaseSignal)
	// SignalRunTakeOver and SignalRunHandBack are what box workflows recorded before
	// SignalRunLease sent instead; runs still listen, so one in flight over an upgrade hears them.
	SignalRunTakeOver = "takeover"
	SignalRunHandBack = "handback"
)

// MaxRunWait is how long a run waits for a person to hand the desktop back before it fails: a
// waiting run pins the box awake.
const MaxRunWait = time.Hour

// DefaultAgentMaxSteps bounds a run whose input does not say.
const DefaultAgentMaxSteps = 50

// AgentRunInput starts an agent run. It carries no authority: the gateway, its protocol and the
// vault secret of the key are the worker's configuration, and each step checks the run's row in
// the database (its box, its starter Owner, who must still drive the box) before it opens a
// secret. Histories of runs started with Provider, BaseURL and KeySecret fields still replay:
// those fields are ignored.
type AgentRunInput struct {
	RunID    string
	BoxID    cocoonbox.BoxID
	Owner    string
	Task     string
	System   string
	Model    string
	MaxSteps int // 0 is DefaultAgentMaxSteps
	// Record records the box's desktop while the run goes (RecordDesktop).
	Record bool `json:",omitempty"`
}

// AgentRunResult is how a run ended.
type AgentRunResult struct {
	State cocoonbox.AgentRunState
	Steps int
	Text  string // what the model said last
}

// RunMessageSignal is a user's message to a running agent, passed into its next step.
type RunMessageSignal struct {
	Text string
}

// RunLeaseSignal tells a run the desktop's control lease changed hands (SignalRunLease); the box
// workflow sends it to every run pinning the box, in the order of the changes.
type RunLeaseSignal struct {
	Controller string // who holds the lease now; "" after a hand-back
	// Seq is the box's BoxCarriedState.LeaseSeq after this change, which the run passes on to the
	// box's agent (see LeaseSeq).
	Seq int64
}

// RunCancelSignal stops a run.
type RunCancelSignal struct {
	By string
}

// AttemptsIDPrefix starts the ID of a best-of-N run (AttemptsWorkflow).
const AttemptsIDPrefix = "att_"

// AttemptsWorkflowID is the workflow ID of best-of-N run id.
func AttemptsWorkflowID(id string) string { return "attempts/" + id }

// Messages of a best-of-N run: accept the judge's pick or another attempt (AcceptInput), or
// discard them all.
const (
	UpdateAccept  = "accept"
	UpdateDiscard = "discard"
	QueryAttempts = "attempts"
)

// AttemptsInput is a best-of-N run: Task run on each of Forks (forks of BoxID the front door
// made) as run Runs[i]. The front door wrote its row first; the workflow reads the forks and
// runs it acts on from that row, never from this input alone.
type AttemptsInput struct {
	ID       string
	BoxID    cocoonbox.BoxID
	Owner    string
	Task     string
	System   string
	Model    string
	MaxSteps int
	Forks    []cocoonbox.BoxID
	Runs     []string
}

// AcceptInput accepts attempt Choice (1-based; 0 is the judge's pick): its box's state replaces
// the box the attempts forked from, and every fork is deleted.
type AcceptInput struct {
	Choice int
	By     string `json:",omitempty"`
}

// AttemptsStatus is where a best-of-N run is: its state (store.Attempts*), the judge's pick and
// the attempt chosen.
type AttemptsStatus struct {
	State  string
	Winner int
	Reason string
	Chosen int
	Error  string `json:",omitempty"`
}

// UpdateAdopt replaces a box's state with a checkpoint of another box (AdoptInput): the accepted
// attempt of a best-of-N run.
const UpdateAdopt = "adopt"

// AdoptInput names the checkpoint (with memory) of box From the box's new sandbox is claimed
// from, on node Node.
type AdoptInput struct {
	From         cocoonbox.BoxID
	CheckpointID string
	Node         string `json:",omitempty"`
}
