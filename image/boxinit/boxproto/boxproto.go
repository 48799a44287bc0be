// Package boxproto is the wire protocol between the sandbox engine's runtimes and cocoonbox-init,
// the PID 1 of every box. It lives beside the init's source so that both ends are compiled from
// one definition and a change to it changes the image recipe hash (and so rebuilds the image).
//
// The engine reaches the init through a relay process it starts in the box (`runsc exec` under
// gVisor); the relay pipes bytes between its stdio and the init's abstract unix socket. Commands
// are spawned by the init, not by the relay, because gVisor kills every process descended from
// `runsc exec` when it restores a checkpoint: only children of the box's init survive a wake.
//
// A connection carries frames: one type byte, a big-endian uint32 length, then the payload.
// The engine sends TypeRequest first, then stdin frames and TypeKill; the init answers with
// output frames and ends with exactly one TypeExit or TypeFailure.
package boxproto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/yamux"
)

// Version is bumped on every change of the protocol or of the init's behaviour. The engine sends
// it in each request and the init refuses versions it does not speak, so a box started from an
// older image fails loudly instead of misbehaving.
const Version = 1

// InitPath is where every image built by image/build.sh installs the init (and relay) binary.
const InitPath = "/usr/local/sbin/cocoonbox-init"

// SocketName is the init's abstract unix socket. Abstract sockets live in the box's network
// namespace and hold no file on the box's disk, so nothing is left behind in a snapshot.
const SocketName = "@cocoonbox-init"

// Relay status bytes: the relay writes one of them to its stdout before any payload, so the
// engine can tell "connected" from "nothing listens there" without guessing from an early EOF.
const (
	RelayOK     byte = 0
	RelayFailed byte = 1 // followed by a short message, then EOF
)

// MaxMuxTarget bounds the first line of a mux stream, which names its target ("init" or
// "tcp PORT", then a newline).
const MaxMuxTarget = 64

// MuxConfig is the yamux configuration of both ends of a relay mux (`cocoonbox-init relay mux`).
// A stream may have 4 MiB in flight (yamux's default is 256 KiB), half an exec's largest output.
func MuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.MaxStreamWindowSize = 4 << 20
	c.EnableKeepAlive = false // the session is one socket pair; either process ending closes it
	c.ConnectionWriteTimeout = 30 * time.Second
	c.StreamCloseTimeout = 5 * time.Second
	c.LogOutput = io.Discard
	return c
}

// Frame types.
const (
	TypeRequest  byte = 'R' // engine → init: JSON Request, first frame
	TypeStdin    byte = 'I' // engine → init: bytes for the command's stdin
	TypeStdinEOF byte = 'i' // engine → init: close the command's stdin
	TypeKill     byte = 'K' // engine → init: kill the command's process group
	TypeStdout   byte = 'O' // init → engine: bytes the command wrote to stdout
	TypeStderr   byte = 'E' // init → engine: bytes the command wrote to stderr
	TypeExit     byte = 'X' // init → engine: JSON Exit, last frame
	TypeFailure  byte = 'F' // init → engine: JSON Failure, last frame (the command never ran)
)

// MaxFrame bounds a frame's payload so a corrupt length cannot make either side allocate wildly.
const MaxFrame = 1 << 20

// Request asks the init to run one command.
type Request struct {
	Version int      `json:"v"`
	Argv    []string `json:"argv"`
	Cwd     string   `json:"cwd,omitempty"` // "" means "/"
	Env     []string `json:"env,omitempty"` // KEY=VALUE, overriding the init's environment
}

// Exit reports how the command ended. Code is the exit status, or 128+signal when it was
// killed by a signal, as shells report it.
type Exit struct {
	Code   int `json:"code"`
	Signal int `json:"signal,omitempty"`
}

// Failure kinds.
const (
	FailBadCommand = "bad-command" // argv[0] missing or not executable
	FailBadCwd     = "bad-cwd"     // cwd missing or not a directory
	FailBadRequest = "bad-request" // empty argv, unknown version
	FailInternal   = "internal"    // anything else (pipe or fork failure)
)

// Failure reports that the command could not be started.
type Failure struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// ErrFrameTooLarge is returned for a frame longer than MaxFrame.
var ErrFrameTooLarge = errors.New("frame too large")

// WriteFrame writes one frame. Callers serialize writes to one connection themselves.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > MaxFrame {
		return ErrFrameTooLarge
	}
	// One write per frame, so concurrent writers never interleave a header with another's body.
	buf := make([]byte, 5+len(payload))
	buf[0] = typ
	binary.BigEndian.PutUint32(buf[1:5], uint32(len(payload)))
	copy(buf[5:], payload)
	_, err := w.Write(buf)
	return err
}

// WriteJSON writes one frame whose payload is v as JSON.
func WriteJSON(w io.Writer, typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	return WriteFrame(w, typ, b)
}

// ReadFrame reads one frame. It returns io.EOF only when the stream ends between frames.
func ReadFrame(r io.Reader) (typ byte, payload []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("read frame header: %w", err)
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:5])
	if n > MaxFrame {
		return 0, nil, ErrFrameTooLarge
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("read frame body: %w", err)
	}
	return hdr[0], payload, nil
}
