package sandbox

import "time"

// The JSON bodies of the sandboxd API (shared/SANDBOXD.md). The local engine imports these same
// types, so a field added here is added on both ends at once. Field names and shapes follow the
// contract; where it is silent they follow upstream sandboxd's own API document, and each such
// choice is noted on the field. Times are time.Time, which encodes as RFC 3339 (with fractional
// seconds when present) and decodes any RFC 3339 value. Unknown response fields are ignored by
// the client, so an engine may add fields freely; only exec requests reject unknown fields.

// Limits and defaults the contract fixes.
const (
	// MaxBodyBytes caps every request body; a larger one is 400 MsgInvalidBody.
	MaxBodyBytes = 1 << 20
	// MaxExecOutput caps stdout+stderr of one exec; more is 413.
	MaxExecOutput = 8 << 20
	// MaxExecStdin caps an exec's standard input: it travels in the request body, base64, under
	// MaxBodyBytes.
	MaxExecStdin = 512 << 10
	// DefaultTTL is the lease a claim or renew gets for ttl_seconds 0.
	DefaultTTL = 300 * time.Second
	// MaxTTL is the longest lease; longer requests are clamped, not rejected.
	MaxTTL = 86400 * time.Second
)

// Error messages the contract spells out, so the engine and the conformance suite use one text.
const (
	// MsgInvalidBody is the error for a malformed or oversized request body.
	MsgInvalidBody = "invalid request body"
	// MsgOperatorRequired is the 403 a tenant token gets from a root-only endpoint.
	MsgOperatorRequired = "operator token required"
)

// Network lanes.
const (
	// NetNone has no NIC: the sandbox is reachable only through the relays. The default.
	NetNone = "none"
	// NetEgress has a NIC that may reach the internet, under an egress policy. Upstream's cannot
	// hibernate (409); the local engine's hibernates and wakes with its address and policy.
	NetEgress = "egress"
)

// Sizes, as the contract names them; nothing free-form. An empty size means SizeSmall (upstream's
// default; the contract is silent).
const (
	SizeSmall   = "small"   // 1 vCPU, 512 MiB
	SizeMedium  = "medium"  // 2 vCPU, 1 GiB
	SizeLarge   = "large"   // 4 vCPU, 4 GiB
	SizeXLarge  = "xlarge"  // 4 vCPU, 8 GiB
	Size2XLarge = "2xlarge" // 8 vCPU, 16 GiB
)

// ClaimRequest is the body of POST /v1/claim.
type ClaimRequest struct {
	Template string `json:"template"`
	Net      string `json:"net,omitempty"`  // "" means NetNone
	Size     string `json:"size,omitempty"` // "" means SizeSmall
	// TTLSeconds is the lease: 0 means DefaultTTL, above MaxTTL is clamped, negative is 400.
	TTLSeconds int `json:"ttl_seconds,omitempty"`
	// ClaimRef is the caller's name for this claim. Claims are not idempotent: listing by
	// claim_ref is how a caller finds a sandbox whose claim response it lost.
	ClaimRef string `json:"claim_ref,omitempty"`
	// NoRedirect is set when re-posting to a redirect target, so it answers for itself.
	NoRedirect bool `json:"no_redirect,omitempty"`
	// RequirePromoted is copied from a redirect answer into the re-post (upstream cluster field).
	RequirePromoted bool `json:"require_promoted,omitempty"`
	// Egress is the policy of a box on the egress lane; nil means internet. A local-engine
	// extension (see EgressSetter).
	Egress *EgressPolicy `json:"egress,omitempty"`
}

// Egress policies of a box on the egress lane.
const (
	EgressInternet = "internet" // everything but the host, other boxes, private and link-local ranges
	EgressAllow    = "allow"    // only Allow's destinations (and the resolvers)
)

// EgressPolicy is the body of PUT /v1/sandboxes/{id}/egress and a claim's egress field.
type EgressPolicy struct {
	Policy string   `json:"policy"`          // EgressInternet or EgressAllow
	Allow  []string `json:"allow,omitempty"` // "CIDR" or "CIDR:port", IPv4
}

// ClaimResponse is the 200 body of POST /v1/claim and POST /v1/checkpoints/{id}/claim: either a
// sandbox (ID, Token, Deadline, OwnerAddr) or, on a cluster, Redirect alone.
type ClaimResponse struct {
	ID        string    `json:"id,omitempty"`
	Token     string    `json:"token,omitempty"` // the per-sandbox credential; shown only here and on root GET
	Deadline  time.Time `json:"deadline,omitzero"`
	OwnerAddr string    `json:"owner_addr,omitempty"` // host:port or an http(s) origin of the owning node
	// FromCheckpoint names the checkpoint a claim-from-checkpoint branched from (upstream field).
	FromCheckpoint string `json:"from_checkpoint,omitempty"`
	// Start says how a claim was served: StartWarm (a box of a warm pool) or StartCold (booted
	// for it). cocoonbox field; upstream leaves it out.
	Start string `json:"start,omitempty"`
	// Redirect names peers to re-post the same body to, with no_redirect set, in turn.
	Redirect        []string `json:"redirect,omitempty"`
	RequirePromoted bool     `json:"require_promoted,omitempty"`
}

// Ways a claim is served (ClaimResponse.Start).
const (
	StartWarm = "warm"
	StartCold = "cold"
)

// PoolKey identifies a warm pool and the kind of a sandbox. The contract says only "key"; upstream
// encodes it as this object, and so do we.
type PoolKey struct {
	Template string `json:"template"`
	Net      string `json:"net"`
	Size     string `json:"size"`
}

// Sandbox is one row of GET /v1/sandboxes and the body of GET /v1/sandboxes/{id}.
type Sandbox struct {
	ID             string    `json:"id"`
	Key            PoolKey   `json:"key"`
	Deadline       time.Time `json:"deadline"`
	ClaimedAt      time.Time `json:"claimed_at,omitzero"` // first grant; renew and wake do not move it
	Hibernated     bool      `json:"hibernated"`
	Archived       bool      `json:"archived,omitempty"`
	FromCheckpoint string    `json:"from_checkpoint,omitempty"`
	ClaimRef       string    `json:"claim_ref,omitempty"`
	// Token is present only on GET /v1/sandboxes/{id} answered to the configured root token;
	// listings never carry tokens.
	Token string `json:"token,omitempty"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// RenewRequest is the body of POST /v1/sandboxes/{id}/renew; an absent body means TTLSeconds 0.
type RenewRequest struct {
	TTLSeconds int `json:"ttl_seconds"`
}

// RenewResponse is the 200 body of a renew: the deadline actually granted.
type RenewResponse struct {
	Deadline time.Time `json:"deadline"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec. The engine rejects unknown fields.
type ExecRequest struct {
	Argv []string `json:"argv"`
	Cwd  string   `json:"cwd,omitempty"`
	// Env adds variables to the command's environment. The contract says only "env"; upstream
	// takes an object of name to value.
	Env map[string]string `json:"env,omitempty"`
	// TimeoutSeconds bounds the command: 0 is no limit beyond the request's own, negative is
	// 400, and running past it is 504 with the child killed.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// Stdin is the command's standard input, at most MaxExecStdin bytes (base64 in JSON); empty
	// is none. A local-engine extension, sent only when set.
	Stdin []byte `json:"stdin,omitempty"`
}

// ExecResult is the 200 body of an exec. Output that is not UTF-8 arrives with U+FFFD in place of
// the bad bytes; binary data belongs on the ports relay.
type ExecResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

// CheckpointRequest is the body of POST /v1/sandboxes/{id}/checkpoint. The header carries a node
// token; Token proves ownership of the sandbox (the root token may leave it empty).
type CheckpointRequest struct {
	Token string `json:"token"`
	Name  string `json:"name,omitempty"`
	// Memory asks for the sandbox's processes and memory beside its disk, so that a claim from
	// the checkpoint goes on from it (a fork); without it the local engine saves the disk only,
	// which is what a snapshot exports. Only an engine whose Info says CheckpointMemory takes it.
	Memory bool `json:"memory,omitempty"`
}

// Checkpoint is a captured sandbox state that new sandboxes can be claimed from.
type Checkpoint struct {
	ID        string    `json:"id"` // ck_…
	Name      string    `json:"name,omitempty"`
	SandboxID string    `json:"sandbox_id"`
	Key       PoolKey   `json:"key"`
	Tenant    string    `json:"tenant,omitempty"` // the creating tenant; absent for root
	CreatedAt time.Time `json:"created_at"`
	// Memory: the checkpoint holds the sandbox's processes, and a claim from it resumes them.
	Memory bool `json:"memory,omitempty"`
}

// CheckpointResponse is the 200 body of POST /v1/sandboxes/{id}/checkpoint.
type CheckpointResponse struct {
	Checkpoint Checkpoint `json:"checkpoint"`
}

// CheckpointList is the body of GET /v1/checkpoints, newest first. The contract is silent on the
// envelope; this is upstream's.
type CheckpointList struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
}

// CheckpointClaimRequest is the body of POST /v1/checkpoints/{id}/claim. It has no claim_ref
// upstream, so a claim from a checkpoint cannot be adopted after a lost response.
type CheckpointClaimRequest struct {
	TTLSeconds int `json:"ttl_seconds,omitempty"`
	// ClaimRef tags the new sandbox as ClaimRequest.ClaimRef does, so a client whose answer was
	// lost finds it by listing (an engine that predates it ignores it).
	ClaimRef   string `json:"claim_ref,omitempty"`
	NoRedirect bool   `json:"no_redirect,omitempty"`
}

// Stats is the body of GET /v1/sandboxes/{id}/stats.
type Stats struct {
	ID            string `json:"id"`
	CPUCount      int    `json:"cpu_count"`       // from the size tier
	MemTotalBytes int64  `json:"mem_total_bytes"` // from the size tier
	MemUsedBytes  int64  `json:"mem_used_bytes"`
	// MemUsedMeasured is false when nothing could be measured (hibernated, not yet known), so a
	// zero is never read as idle. Upstream field.
	MemUsedMeasured bool `json:"mem_used_measured"`
	// DiskUsedBytes of DiskTotalBytes are the box's disk in use and its quota, measured on a
	// running box whose disk is a filesystem of its own (absent otherwise). Our field.
	DiskUsedBytes  int64     `json:"disk_used_bytes,omitempty"`
	DiskTotalBytes int64     `json:"disk_total_bytes,omitempty"`
	Hibernated     bool      `json:"hibernated"`
	MeasuredAt     time.Time `json:"measured_at"`
}

// PoolSpec is one desired warm pool in a PUT /v1/pools body. Net and Size default like a claim's.
type PoolSpec struct {
	Template             string `json:"template"`
	Net                  string `json:"net,omitempty"`
	Size                 string `json:"size,omitempty"`
	Warm                 int    `json:"warm"`
	WarmMax              int    `json:"warm_max,omitempty"`
	IdleHibernateSeconds int    `json:"idle_hibernate_seconds,omitempty"`
}

// PoolsRequest is the body of PUT /v1/pools. It replaces the whole set: omitted pools drain.
type PoolsRequest struct {
	Pools []PoolSpec `json:"pools"`
}

// PoolInfo is one pool's live state in Info.
type PoolInfo struct {
	Key       PoolKey `json:"key"`
	Warm      int     `json:"warm"`
	Refilling int     `json:"refilling"`
	Target    int     `json:"target"`
	Golden    bool    `json:"golden"` // the pool's snapshot exists, so refills clone
}

// Info is the body of GET /v1/info and of PUT /v1/pools.
type Info struct {
	Pools      []PoolInfo `json:"pools"`
	Claimed    int        `json:"claimed"`    // includes hibernated and archived
	Hibernated int        `json:"hibernated"` // claims whose sandbox is hibernated now
	Archived   int        `json:"archived"`
	// Upstream fields, absent when false or empty.
	Draining         bool     `json:"draining,omitempty"`
	AtCapacity       bool     `json:"at_capacity,omitempty"`
	AtCapacityReason string   `json:"at_capacity_reason,omitempty"`
	Peers            []string `json:"peers,omitempty"`
	AdvertiseAddr    string   `json:"advertise_addr,omitempty"`

	// Runtime names a local engine's runtime ("gvisor", "process"); upstream sandboxd leaves it
	// empty. cocoonbox field.
	Runtime string `json:"runtime,omitempty"`
	// Capabilities is what a local engine can really do; nil means upstream sandboxd, which can
	// do everything the contract lists. cocoonbox field.
	Capabilities *Capabilities `json:"capabilities,omitempty"`
	// Capacity is what a local engine admits boxes up to; nil from upstream sandboxd. cocoonbox
	// field.
	Capacity *Capacity `json:"capacity,omitempty"`
}

// Capacity is the limits a local engine admits boxes by, and how much of them its boxes take.
type Capacity struct {
	// MemoryMiB is the memory boxes' sizes may add up to (the host's less a reserve, times
	// memory_overcommit); CommittedMiB what the sizes of its boxes add up to now.
	MemoryMiB    int64 `json:"memory_mib"`
	CommittedMiB int64 `json:"committed_mib"`
	MaxSandboxes int   `json:"max_sandboxes"`
}

// Capabilities is how a local engine says what it cannot fake (SANDBOXD.md: "where the local
// engine cannot match a behaviour it must say so in GET /v1/info").
type Capabilities struct {
	// MemoryHibernate: hibernate keeps processes and memory, so a woken sandbox resumes them.
	// False means hibernate keeps the disk and stops every process.
	MemoryHibernate bool `json:"memory_hibernate"`
	// CheckpointMemory: a claim from a checkpoint resumes its processes; false means disk only.
	CheckpointMemory bool `json:"checkpoint_memory"`
	// AgentRelay: GET /v1/sandboxes/{id}/agent is served.
	AgentRelay bool `json:"agent_relay"`
	// Lanes are the network lanes this engine can claim (e.g. ["none"]).
	Lanes []string `json:"lanes,omitempty"`
	// Isolation says what separates boxes, e.g. "gvisor (systrap)", "namespaces".
	Isolation string `json:"isolation,omitempty"`
	// DiskExport: GET /v1/checkpoints/{id}/disk streams a checkpoint's disk in cocoonbox's
	// snapshot format and POST /v1/checkpoints/import makes a checkpoint from such a stream (a
	// local-engine extension; upstream sandboxd has no disk export).
	DiskExport bool `json:"disk_export,omitempty"`
	// IncrementalDisk: POST /v1/checkpoints/{id}/disk with an earlier export's index (GET
	// /v1/checkpoints/{id}/disk/index) streams only what changed since, and an import takes a
	// chain of such streams (HeaderLayers).
	IncrementalDisk bool `json:"incremental_disk,omitempty"`
	// CheckpointSince: POST /v1/sandboxes/{id}/checkpoint/since with an earlier export's index
	// copies only what changed since, for an export against that index (not a claim).
	CheckpointSince bool `json:"checkpoint_since,omitempty"`
	// ImportClaim: POST /v1/sandboxes/import?template=&net=&size=&ttl_seconds=&claim_ref= with an
	// import's headers and body claims a sandbox whose disk is that stream or chain, unpacked
	// straight into it.
	ImportClaim bool `json:"import_claim,omitempty"`
}

// The checkpoint disk export's content type and trailers: the stream's sha256 (hex), its size
// in bytes, its file count and (incremental) deletions, known only once it has been written.
// An import of a chain names its layers, oldest first, in HeaderLayers as "sha256:bytes,…"
// over a body that is their concatenation.
const (
	DiskExportContentType = "application/zstd"
	TrailerSHA256         = "X-Snapshot-Sha256"
	TrailerBytes          = "X-Snapshot-Bytes"
	TrailerFiles          = "X-Snapshot-Files"
	TrailerDeleted        = "X-Snapshot-Deleted"
	HeaderLayers          = "X-Snapshot-Layers"
	// HeaderSandboxToken carries the sandbox's token on a checkpoint whose body is an index
	// (POST /v1/sandboxes/{id}/checkpoint/since), as CheckpointRequest.Token does in JSON.
	HeaderSandboxToken = "X-Sandbox-Token"
)

// DiskExport is what a finished disk export stream reported in its trailers.
type DiskExport struct {
	SHA256  string
	Bytes   int64
	Files   int64
	Deleted int64 // deletion entries of an incremental stream
}

// MemoryHibernate reports whether hibernate preserves processes and memory: always on upstream
// sandboxd (microVM snapshots), and on a local engine only when it says so.
func (i Info) MemoryHibernate() bool {
	return i.Capabilities == nil || i.Capabilities.MemoryHibernate
}

// ErrorBody is the body of every error answer.
type ErrorBody struct {
	Error string `json:"error"`
}
