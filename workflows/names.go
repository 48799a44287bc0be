package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox"
)

// TaskQueue is the queue every cocoonbox workflow and activity runs on.
const TaskQueue = "cocoonbox"

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
	SignalTouch     = "touch"
	SignalViewers   = "viewers"
	SignalPin       = "pin"
	SignalUnpin     = "unpin"
	QueryStatus     = "status"
)

// Search attributes the box workflow keeps current so operators can filter in the Temporal UI.
var (
	SearchAttrOwner    = temporal.NewSearchAttributeKeyKeyword("Owner")
	SearchAttrBoxState = temporal.NewSearchAttributeKeyKeyword("BoxState")
	SearchAttrBoxName  = temporal.NewSearchAttributeKeyKeyword("BoxName")
)

// ErrTypeInvalidTransition is the ApplicationError type a validator answers when a message does
// not apply to the box's current state; nothing is written to history for it.
const ErrTypeInvalidTransition = "InvalidTransition"

// DefaultOpsBeforeContinue is how many operations one run serves before continuing as new, well
// under the server's 2,000 updates per run.
const DefaultOpsBeforeContinue = 200

// Policy is how a box behaves on its own.
type Policy struct {
	// IdleAfter is how long a box with no viewer, no pin, no operation and no touch stays running
	// before it hibernates; 0 never hibernates it by itself.
	IdleAfter time.Duration
	// LeaseTTL is the sandbox lease asked for at claim and renewal; 0 is the engine's default.
	LeaseTTL time.Duration
}

// BoxWorkflowInput starts (or continues) a box's entity workflow.
type BoxWorkflowInput struct {
	BoxID  cocoonbox.BoxID
	Owner  string
	Name   string
	Size   cocoonbox.Size
	Policy Policy
	// OpsBeforeContinue overrides DefaultOpsBeforeContinue (tests lower it); 0 is the default.
	OpsBeforeContinue int
	// State is the compact state a previous run carried over; nil on the first run.
	State *BoxCarriedState
}

// BoxCarriedState is what one run of the box workflow hands the next on continue-as-new. It holds
// references only, never secrets or bytes.
type BoxCarriedState struct {
	State      cocoonbox.BoxState
	SandboxID  string
	Deadline   time.Time // the sandbox lease's end
	NextRenew  time.Time // when to renew the lease; zero means not scheduled
	Attempt    int       // claims made so far; the next claim uses Attempt+1 in its claim_ref
	Viewers    int
	Pins       []string // sorted, so the state is deterministic
	LastError  string
	LastActive time.Time // the last touch, operation or presence change, for the idle clock
}

// CreateInput is the create update's argument (sent with Update-with-Start).
type CreateInput struct{}

// WakeInput is the wake update's argument.
type WakeInput struct{}

// HibernateInput is the hibernate update's argument.
type HibernateInput struct{}

// DeleteInput is the delete update's argument.
type DeleteInput struct {
	// PurgeSnapshots deletes the box's snapshots too; honoured once snapshots exist.
	PurgeSnapshots bool
}

// SetPolicyInput is the setpolicy update's argument; it replaces the whole policy.
type SetPolicyInput struct {
	IdleAfter time.Duration
	LeaseTTL  time.Duration
}

// ViewersSignal reports how many desktop viewers are attached now.
type ViewersSignal struct {
	Count int
}

// PinSignal pins (or, on the unpin signal, unpins) the box awake on behalf of Ref, e.g. a run ID.
type PinSignal struct {
	Ref string
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
}
