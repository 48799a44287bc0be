// Package rfb guards the box's desktop: it filters the client→server half of
// an RFB (VNC, RFC 6143) connection before it reaches the box's Xvnc, which
// runs without a password. Because the server trusts whoever reaches it, the
// edge is where viewers are kept from typing, pointing, pasting or resizing,
// where one client is kept from disconnecting the others, and where anything
// the edge does not understand ends the connection instead of passing through.
//
// The grammar lives in this file (what a well-formed client stream is); the
// policy lives in filter.go (what each mode may forward). gate.go holds the
// other end: the password a local tunnel asks of stock viewers before it
// connects them to the edge.
package rfb

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Mode says what a client may do to the desktop it is connected to.
type Mode int

const (
	// View lets a client watch: its input, clipboard and resize requests are dropped.
	View Mode = iota
	// Control lets a client drive the desktop with keyboard, pointer, clipboard and resize.
	Control
)

// ErrProtocol is wrapped by every refusal of the client's stream, with a
// reason a person can read after the colon.
var ErrProtocol = errors.New("rfb: protocol violation")

// Client message types the edge understands (RFC 6143 §7.5, plus
// SetDesktopSize from the ExtendedDesktopSize extension).
const (
	msgSetPixelFormat           = 0
	msgSetEncodings             = 2
	msgFramebufferUpdateRequest = 3
	msgKeyEvent                 = 4
	msgPointerEvent             = 5
	msgClientCutText            = 6
	msgSetDesktopSize           = 251
)

const (
	secNone         = 1       // the only security type the edge allows
	maxEncodings    = 1024    // SetEncodings lists longer than this are refused
	maxCutText      = 1 << 20 // ClientCutText payloads longer than this are refused
	keepBufCap      = 64 << 10
	protocolVersion = 12 // length of "RFB 003.008\n"
)

// refusef builds an ErrProtocol refusal.
func refusef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

// parser reads a client→server RFB stream off a buffered reader, one
// handshake step or message at a time. It checks framing and field values and
// zeroes padding; it never decides what is forwarded. A bare io.EOF from any
// method means the stream ended cleanly at a boundary; an end inside a step is
// reported as a wrapped io.ErrUnexpectedEOF.
type parser struct {
	r   *bufio.Reader
	buf []byte // the step or message being parsed, in wire form; reused
}

// fill reads n bytes of wire form for the step or message called name. If
// first is non-negative it was already read (a message type) and starts the
// wire form; otherwise an EOF before any byte is a clean end.
func (p *parser) fill(first int, n int, name string) ([]byte, error) {
	if cap(p.buf) > keepBufCap {
		p.buf = nil // do not pin one large clipboard for the rest of the session
	}
	p.buf = p.buf[:0]
	if first >= 0 {
		p.buf = append(p.buf, byte(first))
	}
	return p.extend(n-len(p.buf), name, first < 0)
}

// extend reads n more bytes onto the wire form of name.
func (p *parser) extend(n int, name string, cleanEOF bool) ([]byte, error) {
	start := len(p.buf)
	p.buf = append(p.buf, make([]byte, n)...)
	got, err := io.ReadFull(p.r, p.buf[start:])
	switch {
	case err == nil:
		return p.buf, nil
	case err == io.EOF && cleanEOF && got == 0:
		return nil, io.EOF
	case err == io.EOF:
		err = io.ErrUnexpectedEOF
	}
	return nil, fmt.Errorf("read %s: %w", name, err)
}

// version reads the client's ProtocolVersion and returns its minor number and wire form.
func (p *parser) version() (int, []byte, error) {
	b, err := p.fill(-1, protocolVersion, "protocol version")
	if err != nil {
		return 0, nil, err
	}
	switch string(b) {
	case "RFB 003.003\n":
		return 3, b, nil
	case "RFB 003.007\n":
		return 7, b, nil
	case "RFB 003.008\n":
		return 8, b, nil
	}
	return 0, nil, refusef("protocol version %q is not supported; the edge allows 3.3, 3.7 and 3.8", b)
}

// securityType reads the security type a 3.7 or 3.8 client chose.
func (p *parser) securityType() ([]byte, error) {
	b, err := p.fill(-1, 1, "security type")
	if err != nil {
		return nil, err
	}
	if b[0] != secNone {
		return nil, refusef("security type %d (%s) is not offered; the edge allows only None", b[0], securityName(b[0]))
	}
	return b, nil
}

// clientInit reads ClientInit, whose one byte is the shared flag.
func (p *parser) clientInit() ([]byte, error) {
	return p.fill(-1, 1, "client init")
}

// message reads one client message and returns its wire form with padding zeroed.
func (p *parser) message() ([]byte, error) {
	t, err := p.r.ReadByte()
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil {
		return nil, fmt.Errorf("read message type: %w", err)
	}
	switch t {
	case msgSetPixelFormat:
		m, err := p.fill(int(t), 20, "SetPixelFormat")
		if err != nil {
			return nil, err
		}
		clear(m[1:4])
		clear(m[17:20])
		return m, checkPixelFormat(m[4:17])
	case msgSetEncodings:
		m, err := p.fill(int(t), 4, "SetEncodings")
		if err != nil {
			return nil, err
		}
		m[1] = 0
		n := int(binary.BigEndian.Uint16(m[2:4]))
		if n > maxEncodings {
			return nil, refusef("SetEncodings lists %d encodings; the edge allows at most %d", n, maxEncodings)
		}
		return p.extend(4*n, "SetEncodings", false)
	case msgFramebufferUpdateRequest:
		return p.fill(int(t), 10, "FramebufferUpdateRequest")
	case msgKeyEvent:
		m, err := p.fill(int(t), 8, "KeyEvent")
		if err != nil {
			return nil, err
		}
		clear(m[2:4])
		return m, nil
	case msgPointerEvent:
		return p.fill(int(t), 6, "PointerEvent")
	case msgClientCutText:
		m, err := p.fill(int(t), 8, "ClientCutText")
		if err != nil {
			return nil, err
		}
		clear(m[1:4])
		n := binary.BigEndian.Uint32(m[4:8])
		if int32(n) < 0 {
			return nil, refusef("ClientCutText has negative length %d (extended clipboard), which the edge does not offer", int32(n))
		}
		if n > maxCutText {
			return nil, refusef("ClientCutText of %d bytes is over the edge's limit of %d", n, maxCutText)
		}
		return p.extend(int(n), "ClientCutText", false)
	case msgSetDesktopSize:
		m, err := p.fill(int(t), 8, "SetDesktopSize")
		if err != nil {
			return nil, err
		}
		m[1] = 0
		m[7] = 0
		return p.extend(16*int(m[6]), "SetDesktopSize", false)
	}
	return nil, refusef("client message type %d (%s) is not allowed", t, messageName(t))
}

// checkPixelFormat refuses pixel formats Xvnc could not honour, so the
// refusal names the fault instead of surfacing as a dropped connection.
func checkPixelFormat(pf []byte) error {
	bpp, depth, bigEndian, trueColour := pf[0], pf[1], pf[2], pf[3]
	if bpp != 8 && bpp != 16 && bpp != 32 {
		return refusef("SetPixelFormat bits-per-pixel %d is not 8, 16 or 32", bpp)
	}
	if depth > bpp {
		return refusef("SetPixelFormat depth %d exceeds bits-per-pixel %d", depth, bpp)
	}
	if bigEndian > 1 || trueColour > 1 {
		return refusef("SetPixelFormat flags big-endian %d, true-colour %d are not 0 or 1", bigEndian, trueColour)
	}
	if trueColour == 0 {
		return nil
	}
	for i, name := range []string{"red", "green", "blue"} {
		maxv := binary.BigEndian.Uint16(pf[4+2*i:])
		shift := int(pf[10+i])
		if maxv&(maxv+1) != 0 {
			return refusef("SetPixelFormat %s-max %d is not one less than a power of two", name, maxv)
		}
		bits := 0
		for v := maxv; v != 0; v >>= 1 {
			bits++
		}
		if shift+bits > int(bpp) {
			return refusef("SetPixelFormat %s channel (shift %d, %d bits) does not fit in %d bits", name, shift, bits, bpp)
		}
	}
	return nil
}

func securityName(t byte) string {
	switch t {
	case 0:
		return "Invalid"
	case 1:
		return "None"
	case 2:
		return "VNC auth"
	case 16:
		return "Tight"
	case 18:
		return "TLS"
	case 19:
		return "VeNCrypt"
	}
	return "unknown"
}

func messageName(t byte) string {
	switch t {
	case 150:
		return "EnableContinuousUpdates"
	case 248:
		return "Fence"
	case 250:
		return "xvp"
	case 253:
		return "gii"
	case 255:
		return "QEMU"
	}
	return "unknown"
}
