package cocoonbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// NewSnapshotID returns a fresh snapshot ID: "sn_" and 16 lowercase hex digits. Workflows call it
// through a SideEffect, so a replay sees the same ID.
func NewSnapshotID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return "sn_" + hex.EncodeToString(b[:])
}

// ValidateSnapshotID reports whether id has the snapshot ID form; field names it in the error.
func ValidateSnapshotID(field, id string) error {
	switch {
	case id == "":
		return Invalid(field, "is required")
	case !strings.HasPrefix(id, "sn_") || len(id) != 3+16 || !isLowerHex(id[3:]):
		return Invalid(field, fmt.Sprintf("must be sn_ followed by 16 lowercase hex digits, got %q", id))
	}
	return nil
}

// SnapshotState is where a snapshot upload is.
type SnapshotState string

// Snapshot states: a snapshot is usable only when complete (uploaded and verified).
const (
	SnapshotUploading SnapshotState = "uploading"
	SnapshotComplete  SnapshotState = "complete"
	SnapshotFailed    SnapshotState = "failed"
)

// Snapshot is a box's state layer stored in object storage.
type Snapshot struct {
	ID        string
	BoxID     BoxID
	ParentID  string
	State     SnapshotState
	ObjectKey string
	Bytes     int64
	SHA256    string
	Files     int64
	Pinned    bool
	CreatedAt time.Time
	// BaseID is the snapshot this one is incremental on (it holds the files changed since);
	// empty for a full snapshot. Depth counts the bases under it.
	BaseID   string
	Depth    int
	IndexKey string // the object holding the index of its tree; empty for none
	// Kind is SnapshotKindDisk (the engine's export of the box's disk) or SnapshotKindState
	// (trees read through the box's agent, from an engine without disk export).
	Kind string
}

// Snapshot kinds: what a snapshot's object holds, and so how it is restored.
const (
	SnapshotKindDisk  = "disk"
	SnapshotKindState = "state"
)

// AgentRunState is where an agent run is.
type AgentRunState string

// Agent run states.
const (
	AgentRunRunning AgentRunState = "running"
	AgentRunWaiting AgentRunState = "waiting" // a person holds control of the desktop
	// AgentRunWaitingForUser: the agent asked its starter a question (ask_user) and waits for the
	// answer; the box may hibernate meanwhile.
	AgentRunWaitingForUser AgentRunState = "waiting_for_user"
	AgentRunSucceeded      AgentRunState = "succeeded"
	AgentRunFailed         AgentRunState = "failed"
	AgentRunCancelled      AgentRunState = "cancelled"
)

// AgentRun is one task given to a box's resident agent.
type AgentRun struct {
	ID        string
	BoxID     BoxID
	Owner     string
	Model     string
	State     AgentRunState
	CreatedAt time.Time
	EndedAt   time.Time
}
