package cocoonbox

import "time"

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
}

// AgentRunState is where an agent run is.
type AgentRunState string

// Agent run states.
const (
	AgentRunRunning   AgentRunState = "running"
	AgentRunWaiting   AgentRunState = "waiting" // a person holds control of the desktop
	AgentRunSucceeded AgentRunState = "succeeded"
	AgentRunFailed    AgentRunState = "failed"
	AgentRunCancelled AgentRunState = "cancelled"
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
