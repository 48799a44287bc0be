// Package wire holds what the control plane and the in-box agent must agree on to reach each
// other: the agent's loopback ports, where the box keeps the agent's credential, and the model
// link's protocol line. It imports nothing, so both sides (agentvm in the box, internal/boxlink
// and activities outside it) name these once, and image/desktop/boot.sh is checked against them.
package wire

// AgentPort is where the agent serves gRPC (agentvm/v1) on the box's loopback, reached through
// the engine's ports relay with the per-box credential.
const AgentPort = 7070

// LinkPort is where the agent accepts model links on the box's loopback: connections the worker
// opens for a step, over which the agent's model calls travel (the box has no network).
const LinkPort = 7071

// MCPPort is where the agent serves MCP (MCPPath, no credential) on the box's loopback.
const MCPPort = 7072

// MCPPath is the agent's MCP endpoint.
const MCPPath = "/mcp"

// CredentialPath is the file in the box the agent reads its per-box credential from; the
// control plane writes it after boot, and the agent re-reads it when it changes.
const CredentialPath = "/run/cocoonbox/agent-credential"

// CredentialEnv names the environment variable holding the credential when no file is given.
const CredentialEnv = "COCOONBOX_AGENT_CREDENTIAL"

// LinkProtocol opens a model link's first line: "COCOONBOX-LINK/1 <credential> <run_id> <step>\n".
const LinkProtocol = "COCOONBOX-LINK/1"

// FileProtocol opens a file link's first line: "COCOONBOX-FILE/1 <credential>\n", sent to
// LinkPort and answered "OK\n" or "ERR <reason>\n". A file link carries one upload as frames, each
// a 4-byte big-endian length and that many bytes: first a WriteFileRequest naming the file
// (agentvm/v1, no data), then the file's bytes in frames of at most MaxFileFrame, then an empty
// frame that ends the file. The agent answers with one frame holding a google.rpc.Status: OK
// with the written file's FileInfo as its one detail, or the error WriteFile would have
// returned. A file link skips gRPC's per-frame work, which is what an upload costs in a box.
const FileProtocol = "COCOONBOX-FILE/1"

// MaxFileFrame bounds a file link's frame.
const MaxFileFrame = 4 << 20

// Flow control of the agent's gRPC link, the same on both ends. A file copy crosses the engine's
// relay, whose round trip (a process in the box and one on the host) is far longer than
// loopback's: HTTP/2's default 64 KiB windows would hold a copy to a window per round trip, and
// its 32 KiB socket buffers to a syscall per frame, which under gVisor is what costs.
const (
	// StreamWindow is each stream's flow-control window.
	StreamWindow = 8 << 20
	// ConnWindow is the connection's.
	ConnWindow = 16 << 20
	// SocketBuffer is the read and write buffer of the link's socket.
	SocketBuffer = 1 << 20
)
