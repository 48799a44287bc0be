package sandbox

import (
	"context"
	"io"
	"net"
	"time"
)

// Client is what activities use to reach a sandbox engine. HTTP is the implementation; tests use
// it against sandboxtest's fake or a real engine rather than mocking this interface.
//
// Credentials: the client holds a node token (root or tenant) for node-level verbs; verbs on one
// sandbox take a SandboxRef carrying that sandbox's own token, which is what the engine wants for
// exec and relays. A ref with an empty Token falls back to the node token, which the engine
// accepts from root for release, hibernate, wake and renew (operator cleanup by id).
type Client interface {
	// Claim gets a sandbox for req, adopting the one already claimed under req.ClaimRef (which is
	// required) instead of claiming twice: it lists by claim_ref first, and lists again before
	// retrying after an answer that may have been lost. Redirects are followed. See claim.go.
	Claim(ctx context.Context, req ClaimRequest) (Claimed, error)
	// List returns the live sandboxes the token may see; a non-empty claimRef keeps only those
	// claimed under exactly that reference. Rows never carry tokens.
	List(ctx context.Context, claimRef string) ([]Sandbox, error)
	// Get returns one sandbox row (root only); with the configured root token it carries the
	// sandbox's token.
	Get(ctx context.Context, id string) (Sandbox, error)
	// Release destroys the sandbox. A sandbox that is already gone is success (404 is done).
	Release(ctx context.Context, sb SandboxRef) error
	// Hibernate frees the sandbox's CPU and memory, keeping its state; hibernated is success.
	Hibernate(ctx context.Context, sb SandboxRef) error
	// Wake brings a hibernated sandbox back; running is success.
	Wake(ctx context.Context, sb SandboxRef) error
	// Renew resets the lease to ttl from now (0: the engine default) and returns the deadline
	// granted, which may be clamped.
	Renew(ctx context.Context, sb SandboxRef, ttl time.Duration) (time.Time, error)
	// Exec runs a command to completion in the sandbox, waking it if hibernated. A non-zero exit
	// is a result, not an error; ErrTimeout and ErrTooLarge mean the child was killed.
	Exec(ctx context.Context, sb SandboxRef, req ExecRequest) (ExecResult, error)
	// DialPort opens a byte pipe to 127.0.0.1:port inside the sandbox through the ports relay.
	// ctx bounds only the dial and upgrade; the connection lives until closed.
	DialPort(ctx context.Context, sb SandboxRef, port int) (Conn, error)
	// Checkpoint captures the sandbox's state while it keeps running.
	Checkpoint(ctx context.Context, sb SandboxRef, name string) (Checkpoint, error)
	// ClaimFromCheckpoint claims a new sandbox branched from a checkpoint (ttl 0: default). It
	// cannot be adopted after a lost answer (the API has no claim_ref here), so it is not retried.
	ClaimFromCheckpoint(ctx context.Context, checkpointID string, ttl time.Duration, claimRef string) (Claimed, error)
	// ListCheckpoints returns the checkpoints the token may see, newest first.
	ListCheckpoints(ctx context.Context) ([]Checkpoint, error)
	// DeleteCheckpoint removes a checkpoint; ErrNotFound when it is gone.
	DeleteCheckpoint(ctx context.Context, id string) error
	// Info returns the engine's pools, counters and, for a local engine, its capabilities (root).
	Info(ctx context.Context) (Info, error)
	// Stats returns one sandbox's resource use (root).
	Stats(ctx context.Context, id string) (Stats, error)
	// SetPools replaces the engine's warm pools (root); omitted pools drain.
	SetPools(ctx context.Context, pools []PoolSpec) (Info, error)
}

// NodeClaimer is the optional ability to claim on a chosen engine node of a deployment with
// several, addressed as SandboxRef.Addr is; HTTP has it. Callers find it by a type assertion.
type NodeClaimer interface {
	// ClaimOn is Claim on the engine at addr (adopting a sandbox claimed there under the same
	// claim_ref first); the sandbox's Addr is addr, or empty for the client's own engine.
	ClaimOn(ctx context.Context, addr string, req ClaimRequest) (Claimed, error)
	// Adopt returns the sandbox claimed under ref on the engine at addr, if there is one the
	// client can hold, so a retried claim finds what an earlier try made on another node.
	Adopt(ctx context.Context, addr, ref string) (Claimed, bool, error)
}

// NodeDialer is a client that reaches another engine node of the deployment with its own
// credentials, for the verbs that name no sandbox (checkpoints, their disks, listings): a box's
// snapshot is exported from, and a restore imported into, the node that holds the sandbox.
type NodeDialer interface {
	// At returns a client of the engine at addr (host:port or an http(s) origin); the client
	// itself for an empty addr or its own engine's.
	At(addr string) Client
}

// DiskPorter is the optional ability to move a checkpoint's disk out of and into an engine in
// cocoonbox's snapshot format: the local engine has it (Info's DiskExport says so), upstream
// sandboxd does not. Callers find it by a type assertion on their Client.
type DiskPorter interface {
	// ExportCheckpointDisk streams checkpoint id's disk into w and returns its checksum, size
	// and file count, verified against what was received. With base, the index of an earlier
	// export, the stream holds only what changed since (Info's IncrementalDisk).
	ExportCheckpointDisk(ctx context.Context, id string, base io.Reader, w io.Writer) (DiskExport, error)
	// CheckpointSince is Checkpoint of only what changed in sb's disk since base, an earlier
	// export's index (Info's CheckpointSince): the sandbox is paused for that, not for a copy
	// of its whole disk. The checkpoint can be exported against base alone, and not claimed.
	CheckpointSince(ctx context.Context, sb SandboxRef, name string, base io.Reader) (Checkpoint, error)
	// CheckpointDiskIndex copies the index of checkpoint id's disk that its export wrote.
	CheckpointDiskIndex(ctx context.Context, id string, w io.Writer) (int64, error)
	// ImportCheckpointDisk makes a checkpoint from r, the streams of layers one after the
	// other (a full one, then incremental ones); boxes claimed from it get key.
	ImportCheckpointDisk(ctx context.Context, r io.Reader, layers []DiskExport, key PoolKey, name string) (Checkpoint, error)
	// ImportClaim claims a sandbox of key whose disk is what ImportCheckpointDisk would make of
	// r and layers, unpacked straight into it (Info's ImportClaim): a restore without a
	// checkpoint that a claim copies whole. Tagged with claimRef as a claim is; not retried.
	ImportClaim(ctx context.Context, r io.Reader, layers []DiskExport, key PoolKey, ttl time.Duration, claimRef string) (Claimed, error)
}

// MemoryCheckpointer is an engine that can checkpoint a sandbox with its processes and memory
// (Info's CheckpointMemory says so), so that sandboxes claimed from the checkpoint go on from
// that moment: a fork. Found by type assertion.
type MemoryCheckpointer interface {
	// CheckpointMemory is Checkpoint with the sandbox's memory. A running sandbox is paused
	// only for the copy; a hibernated one stays asleep.
	CheckpointMemory(ctx context.Context, sb SandboxRef, name string) (Checkpoint, error)
}

// EgressSetter is an engine that can change a networked sandbox's egress policy while it lives
// (the local engine; upstream sandboxd fixes a sandbox's lane at claim). Found by type assertion.
type EgressSetter interface {
	// SetEgress replaces the egress policy of sb, which must be on the NetEgress lane.
	SetEgress(ctx context.Context, sb SandboxRef, p EgressPolicy) error
}

// SandboxRef is what a caller keeps to act on a sandbox: its ID, its own token, and which node
// owns it. Activities keep it out of workflow payloads (the token is a secret).
type SandboxRef struct {
	ID    string
	Token string
	// Addr is the node that holds the sandbox when a redirect sent the claim elsewhere: host:port
	// or an http(s) origin. Empty means the client's base URL, the usual case.
	Addr string
	// Node is the ID of the registered engine node that holds the sandbox (cocoonbox's node
	// records, not the engine's), empty when no record names its engine. The client does not read
	// it; the token store keeps it and resolves Addr from the node's record.
	Node string
}

// Claimed is a sandbox obtained by Claim or ClaimFromCheckpoint.
type Claimed struct {
	SandboxRef
	Deadline  time.Time
	OwnerAddr string // as the engine reported it; informational
	// Adopted is true when Claim found a sandbox already claimed under the ClaimRef (a previous
	// attempt whose answer was lost) and returned it instead of claiming again.
	Adopted bool
	// Start is StartWarm or StartCold when the engine said how it served the claim; "" otherwise.
	Start string
}

// Conn is a ports-relay connection: a net.Conn whose write side can be closed alone, so each end
// can send EOF and keep reading (half-close both ways).
type Conn interface {
	net.Conn
	CloseWrite() error
}
