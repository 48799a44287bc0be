package rfb

import (
	"crypto/des"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"sync"
)

// The local gate. The edge speaks RFB with security type None, which is right for a browser
// that has already presented a token, but stock VNC viewers (macOS Screen Sharing among them)
// refuse a server without a password. A Gate ends the security handshake on the viewer's side
// with VNC Authentication (RFC 6143 §7.2.2) and starts it again towards the edge with None, so
// everything from ClientInit on passes between the two unchanged.

// ErrWrongPassword is returned for a viewer that answered the challenge with another password.
var ErrWrongPassword = errors.New("rfb: wrong VNC password")

// ErrLocked is returned for every viewer once a Gate has seen its limit of wrong passwords.
var ErrLocked = errors.New("rfb: too many wrong VNC passwords")

// lockedReason is what a viewer is told once the gate is locked.
const lockedReason = "too many wrong passwords: restart cocoonbox desktop for a new one"

const (
	version33      = "RFB 003.003\n"
	version37      = "RFB 003.007\n"
	version38      = "RFB 003.008\n"
	secVNCAuth     = 2
	challengeSize  = 16
	maxPasswordLen = 8 // VNC Authentication keys DES with the first 8 bytes
)

// Gate admits local viewers that know its password. It is safe for concurrent use; the count
// of wrong passwords is shared by every viewer it sees.
type Gate struct {
	key         []byte // the password as a DES key: zero-padded, each byte's bits reversed
	maxFailures int

	mu       sync.Mutex
	failures int
}

// NewGate returns a Gate for password (1 to 8 bytes) that refuses every viewer after
// maxFailures wrong answers.
func NewGate(password string, maxFailures int) (*Gate, error) {
	if len(password) == 0 || len(password) > maxPasswordLen {
		return nil, fmt.Errorf("vnc password: want 1 to %d bytes, got %d", maxPasswordLen, len(password))
	}
	if maxFailures < 1 {
		return nil, fmt.Errorf("vnc password: want at least one try, got %d", maxFailures)
	}
	return &Gate{key: desKey(password), maxFailures: maxFailures}, nil
}

// desKey is VNC Authentication's key for password: the first 8 bytes, zero-padded, each
// byte's bits reversed (the reference implementation's DES took its key bits the other way).
func desKey(password string) []byte {
	key := make([]byte, maxPasswordLen)
	copy(key, password)
	for i, b := range key {
		key[i] = bits.Reverse8(b)
	}
	return key
}

// response is VNC Authentication's answer to challenge (16 bytes) for a DES key from desKey.
func response(key, challenge []byte) []byte {
	c, err := des.NewCipher(key)
	if err != nil {
		panic(err) // the key is always 8 bytes
	}
	out := make([]byte, challengeSize)
	c.Encrypt(out[:8], challenge[:8])
	c.Encrypt(out[8:], challenge[8:])
	return out
}

// Pending is a viewer that gave the right password and waits for its SecurityResult: the
// caller connects to the server first, so that a failure there reaches the viewer as a reason.
type Pending struct {
	rw    io.ReadWriter
	minor int // the viewer's protocol version: 3, 7 or 8
}

// Authenticate runs the server side of the handshake with viewer: ProtocolVersion, VNC
// Authentication as the only security type, and the challenge. A wrong password gets a failed
// SecurityResult (with a reason from RFC 6143's 3.8 on) and ErrWrongPassword; a viewer that
// chooses another type is refused with a reason too. Nothing is read past the viewer's
// response, so the viewer's next bytes (ClientInit) are still on viewer.
func (g *Gate) Authenticate(viewer io.ReadWriter) (*Pending, error) {
	if _, err := io.WriteString(viewer, version38); err != nil {
		return nil, fmt.Errorf("write viewer: %w", err)
	}
	v, err := readN(viewer, protocolVersion, "viewer protocol version")
	if err != nil {
		return nil, err
	}
	minor, ok := viewerVersion(v)
	if !ok {
		return nil, refusef("viewer protocol version %q is not RFB 3.x", v)
	}
	p := &Pending{rw: viewer, minor: minor}
	if g.locked() {
		return nil, p.refuseTypes(ErrLocked, lockedReason)
	}
	if minor == 3 {
		// RFB 3.3: the server chooses the type.
		if _, err := viewer.Write(binary.BigEndian.AppendUint32(nil, secVNCAuth)); err != nil {
			return nil, fmt.Errorf("write viewer: %w", err)
		}
	} else {
		if _, err := viewer.Write([]byte{1, secVNCAuth}); err != nil {
			return nil, fmt.Errorf("write viewer: %w", err)
		}
		t, err := readN(viewer, 1, "viewer security type")
		if err != nil {
			return nil, err
		}
		if t[0] != secVNCAuth {
			return nil, p.refuseType(t[0])
		}
	}
	challenge := make([]byte, challengeSize)
	if _, err := rand.Read(challenge); err != nil {
		return nil, fmt.Errorf("vnc challenge: %w", err)
	}
	if _, err := viewer.Write(challenge); err != nil {
		return nil, fmt.Errorf("write viewer: %w", err)
	}
	got, err := readN(viewer, challengeSize, "viewer challenge response")
	if err != nil {
		return nil, err
	}
	if err := g.check(response(g.key, challenge), got); err != nil {
		reason := "wrong password"
		if errors.Is(err, ErrLocked) {
			reason = lockedReason
		}
		return nil, p.fail(err, reason)
	}
	return p, nil
}

// locked reports whether the gate has seen its limit of wrong passwords.
func (g *Gate) locked() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failures >= g.maxFailures
}

// check compares a viewer's response with the right one and counts a wrong one, returning
// ErrWrongPassword with the count. Once the gate is locked it returns ErrLocked whatever the
// response: viewers that reached the challenge together get no more tries than the limit.
func (g *Gate) check(want, got []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failures >= g.maxFailures {
		return ErrLocked
	}
	if subtle.ConstantTimeCompare(want, got) == 1 {
		return nil
	}
	g.failures++
	return fmt.Errorf("%w (%d of %d)", ErrWrongPassword, g.failures, g.maxFailures)
}

// Admit tells the viewer it passed; what it sends next is ClientInit.
func (p *Pending) Admit() error {
	if _, err := p.rw.Write(binary.BigEndian.AppendUint32(nil, 0)); err != nil {
		return fmt.Errorf("write viewer: %w", err)
	}
	return nil
}

// Refuse fails the viewer's SecurityResult with reason (which only 3.8 viewers get to see).
func (p *Pending) Refuse(reason string) error {
	return p.fail(nil, reason)
}

// fail sends a failed SecurityResult, with reason from 3.8 on, and returns err, or a write
// failure when err is nil.
func (p *Pending) fail(err error, reason string) error {
	msg := binary.BigEndian.AppendUint32(nil, 1)
	if p.minor == 8 {
		msg = appendString(msg, reason)
	}
	if _, werr := p.rw.Write(msg); werr != nil && err == nil {
		return fmt.Errorf("write viewer: %w", werr)
	}
	return err
}

// refuseType refuses a viewer that chose a type other than VNC Authentication: a 3.8 viewer
// waits for a SecurityResult and gets one with the reason; a 3.7 one expects none and is closed.
func (p *Pending) refuseType(t byte) error {
	reason := fmt.Sprintf("security type %d (%s) is not offered: this server asks for the VNC password cocoonbox desktop printed",
		t, securityName(t))
	err := refusef("viewer chose %s", reason)
	if p.minor == 8 {
		return p.fail(err, reason)
	}
	return err
}

// refuseTypes refuses the viewer before any security type, the one refusal with a reason
// every version can show: an empty list (3.7, 3.8) or type 0 (3.3), then the reason.
func (p *Pending) refuseTypes(err error, reason string) error {
	msg := []byte{0}
	if p.minor == 3 {
		msg = binary.BigEndian.AppendUint32(nil, 0)
	}
	_, _ = p.rw.Write(appendString(msg, reason))
	return err
}

// viewerVersion is the version a viewer's ProtocolVersion means: 3.7 and 3.8 as they are,
// anything above 3.8 as 3.8, and every other 3.x as 3.3, as RFC 6143 §7.1.1 says of versions
// it does not define.
func viewerVersion(v []byte) (int, bool) {
	if len(v) != protocolVersion || string(v[:8]) != "RFB 003." || v[11] != '\n' {
		return 0, false
	}
	minor := 0
	for _, d := range v[8:11] {
		if d < '0' || d > '9' {
			return 0, false
		}
		minor = 10*minor + int(d-'0')
	}
	switch {
	case minor >= 8:
		return 8, true
	case minor == 7:
		return 7, true
	}
	return 3, true
}

// ConnectNone runs the client side of the handshake with server, choosing security type None,
// up to and including its SecurityResult. It speaks the server's own version (3.3, 3.7 or 3.8):
// everything after the handshake is the same in all three. A refusal returns an error with the
// server's reason; nothing is read past the handshake, so ServerInit is still on server.
func ConnectNone(server io.ReadWriter) error {
	v, err := readN(server, protocolVersion, "server protocol version")
	if err != nil {
		return err
	}
	var minor int
	switch string(v) {
	case version33:
		minor = 3
	case version37:
		minor = 7
	case version38:
		minor = 8
	default:
		return refusef("server protocol version %q is not supported", v)
	}
	if _, err := server.Write(v); err != nil {
		return fmt.Errorf("write server: %w", err)
	}
	if minor == 3 {
		b, err := readN(server, 4, "server security type")
		if err != nil {
			return err
		}
		switch t := binary.BigEndian.Uint32(b); t {
		case 0:
			return serverReason(server, "refused the connection")
		case secNone:
			return nil
		default:
			return refusef("server chose security type %d, not None", t)
		}
	}
	n, err := readN(server, 1, "server security types")
	if err != nil {
		return err
	}
	if n[0] == 0 {
		return serverReason(server, "refused the connection")
	}
	types, err := readN(server, int(n[0]), "server security types")
	if err != nil {
		return err
	}
	if !slices.Contains(types, secNone) {
		return refusef("server does not offer security type None (it offers %v)", types)
	}
	if _, err := server.Write([]byte{secNone}); err != nil {
		return fmt.Errorf("write server: %w", err)
	}
	if minor == 7 {
		return nil // 3.7 sends no SecurityResult for None
	}
	b, err := readN(server, 4, "server security result")
	if err != nil {
		return err
	}
	if binary.BigEndian.Uint32(b) != 0 {
		return serverReason(server, "failed the security handshake")
	}
	return nil
}

// serverReason reads a refusal's reason string and returns it as an error.
func serverReason(server io.Reader, what string) error {
	b, err := readN(server, 4, "server reason length")
	if err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(b)
	if n > maxServerString {
		return refusef("server reason of %d bytes is over the limit of %d", n, maxServerString)
	}
	reason, err := readN(server, int(n), "server reason")
	if err != nil {
		return err
	}
	return fmt.Errorf("the server %s: %s", what, reason)
}

// readN reads exactly n bytes of name; an end of stream on the way is io.ErrUnexpectedEOF.
func readN(r io.Reader, n int, name string) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return b, nil
}

// appendString appends an RFB string: a u32 length, then the bytes.
func appendString(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}
