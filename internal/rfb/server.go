package rfb

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The server→client half. A Control client gets the server's bytes as they
// come; a View client gets them through FilterServer, which frames every
// message and drops ServerCutText (the controller's clipboard, or anything
// copied in the box), extended-clipboard messages included. Framing a
// FramebufferUpdate needs each rectangle's encoding to be understood, so View
// clients may ask only for encodings this file can frame (allowedEncoding),
// and anything else the server sends ends the connection. Every length comes
// from the box, so nothing here allocates by it: pixel data is copied through
// in bounded chunks and only headers are held.

// Server message types (RFC 6143 §7.6).
const (
	msgFramebufferUpdate   = 0
	msgSetColourMapEntries = 1
	msgBell                = 2
	msgServerCutText       = 3
)

// Rectangle encodings FilterServer frames.
const (
	encRaw                 = 0
	encCopyRect            = 1
	encRRE                 = 2
	encHextile             = 5
	encTight               = 7
	encZRLE                = 16
	encTightPNG            = -260
	encDesktopSize         = -223
	encLastRect            = -224
	encCursor              = -239
	encXCursor             = -240
	encDesktopName         = -307
	encExtendedDesktopSize = -308
)

// maxServerString bounds the strings the handshake and DesktopName carry:
// a desktop name or a refusal's reason, never a payload.
const maxServerString = 64 << 10

// ServerStats counts what one filtered server stream did, for tests and metrics.
type ServerStats struct {
	// Passed counts messages forwarded to the client.
	Passed int
	// Dropped counts ServerCutText messages withheld from a View client.
	Dropped int
}

// FilterServer copies the server→client half of s from src to dst until src
// ends (nil on a clean EOF at a message boundary) or fails. In Control mode
// the bytes pass as they are; in View mode (any other mode) each message is
// framed, clipboard messages are dropped, and anything the edge cannot frame
// is refused with an error wrapping ErrProtocol. Failures writing dst are
// wrapped "write client: ...".
func (s *Session) FilterServer(dst io.Writer, src io.Reader) (ServerStats, error) {
	if s.mode == Control {
		_, err := io.Copy(dst, src)
		if err != nil {
			return ServerStats{}, err
		}
		return ServerStats{}, nil
	}
	f := &serverFilter{r: bufio.NewReaderSize(src, 64<<10), w: newWriter(dst), s: s}
	err := f.run()
	if ferr := f.w.Flush(); ferr != nil && err == nil {
		err = ferr
	}
	return f.stats, clean(err)
}

// writer batches the client's messages. Its failures writing the client are writeErrors, marked
// beneath the batch, so that one ReadFrom meets is told from a failed read of the server.
type writer struct{ w *bufio.Writer }

func newWriter(dst io.Writer) *writer {
	return &writer{w: bufio.NewWriterSize(clientWriter{dst}, 256<<10)}
}

func (w *writer) Write(p []byte) (int, error) { return w.w.Write(p) }

// ReadFrom reads a rectangle's pixels from the server straight into the batch, without a copy
// buffer between them: a full frame is megabytes.
func (w *writer) ReadFrom(r io.Reader) (int64, error) { return w.w.ReadFrom(r) }

func (w *writer) Flush() error { return w.w.Flush() }

// clientWriter marks the failures of writing the client.
type clientWriter struct{ w io.Writer }

func (c clientWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil {
		return n, writeError{err}
	}
	return n, nil
}

// writeError is a failure to write the client, as opposed to reading the server.
type writeError struct{ err error }

func (e writeError) Error() string { return "write client: " + e.err.Error() }
func (e writeError) Unwrap() error { return e.err }

type serverFilter struct {
	r     *bufio.Reader
	w     *writer
	s     *Session
	hdr   [24]byte
	stats ServerStats
}

// read reads n (at most 24) header bytes of name and forwards them unless drop.
func (f *serverFilter) read(n int, name string, drop bool) ([]byte, error) {
	b := f.hdr[:n]
	if _, err := io.ReadFull(f.r, b); err != nil {
		return nil, unexpected(name, err)
	}
	if drop {
		return b, nil
	}
	_, err := f.w.Write(b)
	return b, err
}

// copy forwards n bytes of name's body.
func (f *serverFilter) copy(n int64, name string) error {
	got, err := io.CopyN(f.w, f.r, n)
	if got == n {
		return nil
	}
	var we writeError
	if err != nil && !errors.As(err, &we) {
		return unexpected(name, err)
	}
	return err
}

// discard reads and drops n bytes of name's body.
func (f *serverFilter) discard(n int64, name string) error {
	for n > 0 {
		chunk := min(n, 1<<30)
		got, err := f.r.Discard(int(chunk))
		n -= int64(got)
		if err != nil {
			return unexpected(name, err)
		}
	}
	return nil
}

// unexpected names a read failure; an end of stream inside a message is io.ErrUnexpectedEOF.
func unexpected(name string, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read server %s: %w", name, err)
}

// flushIfIdle sends what is batched when the server has nothing more buffered.
func (f *serverFilter) flushIfIdle() error {
	if f.r.Buffered() > 0 {
		return nil
	}
	return f.w.Flush()
}

func (f *serverFilter) run() error {
	if err := f.handshake(); err != nil {
		return err
	}
	for {
		t, err := f.r.ReadByte()
		if err != nil {
			if err == io.EOF {
				return io.EOF
			}
			return unexpected("message type", err)
		}
		if t == msgServerCutText {
			if err := f.dropCutText(); err != nil {
				return err
			}
			f.stats.Dropped++
		} else {
			if err := f.message(t); err != nil {
				return err
			}
			f.stats.Passed++
		}
		if err := f.flushIfIdle(); err != nil {
			return err
		}
	}
}

// handshake forwards the server's side of the handshake up to ServerInit.
func (f *serverFilter) handshake() error {
	v := f.hdr[:protocolVersion]
	if n, err := io.ReadFull(f.r, v); err != nil {
		if err == io.EOF && n == 0 {
			return io.EOF
		}
		return unexpected("protocol version", err)
	}
	var server int
	switch string(v) {
	case "RFB 003.003\n":
		server = 3
	case "RFB 003.007\n":
		server = 7
	case "RFB 003.008\n":
		server = 8
	default:
		return refusef("server protocol version %q is not supported", v)
	}
	if _, err := f.w.Write(v); err != nil {
		return err
	}
	if err := f.w.Flush(); err != nil {
		return err
	}
	minor := min(server, f.s.waitClientVersion())
	if minor == 0 {
		return io.EOF // the client left before choosing a version
	}
	if minor == 3 {
		b, err := f.read(4, "security type", false)
		if err != nil {
			return err
		}
		switch t := binary.BigEndian.Uint32(b); t {
		case 0:
			return f.reason()
		case secNone:
		default:
			return refusef("server chose security type %d; the edge allows only None", t)
		}
	} else {
		b, err := f.read(1, "security types", false)
		if err != nil {
			return err
		}
		if b[0] == 0 {
			return f.reason()
		}
		if err := f.copy(int64(b[0]), "security types"); err != nil {
			return err
		}
		if minor == 8 {
			if err := f.w.Flush(); err != nil {
				return err
			}
			b, err := f.read(4, "security result", false)
			if err != nil {
				return err
			}
			if binary.BigEndian.Uint32(b) != 0 {
				return f.reason()
			}
		}
	}
	// Each step waits for the client's answer: it must not wait in the batch.
	if err := f.w.Flush(); err != nil {
		return err
	}
	b, err := f.read(24, "ServerInit", false)
	if err != nil {
		return err
	}
	if bpp := b[4]; bpp != 8 && bpp != 16 && bpp != 32 {
		return refusef("server pixel format has %d bits per pixel, not 8, 16 or 32", bpp)
	}
	f.s.setServerPixelFormat(b[4:20])
	name := binary.BigEndian.Uint32(b[20:24])
	if name > maxServerString {
		return refusef("server desktop name of %d bytes is over the edge's limit of %d", name, maxServerString)
	}
	if err := f.copy(int64(name), "desktop name"); err != nil {
		return err
	}
	return f.w.Flush()
}

// reason forwards a refusal's reason string; the server closes after it.
func (f *serverFilter) reason() error {
	b, err := f.read(4, "reason length", false)
	if err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(b)
	if n > maxServerString {
		return refusef("server reason of %d bytes is over the edge's limit of %d", n, maxServerString)
	}
	if err := f.copy(int64(n), "reason"); err != nil {
		return err
	}
	return io.EOF
}

// dropCutText reads a ServerCutText, plain or extended, and forwards nothing.
func (f *serverFilter) dropCutText() error {
	b, err := f.read(7, "ServerCutText", true)
	if err != nil {
		return err
	}
	n := int64(int32(binary.BigEndian.Uint32(b[3:7])))
	if n < 0 {
		n = -n // the extended clipboard's form
	}
	return f.discard(n, "ServerCutText")
}

// message forwards one server message other than ServerCutText.
func (f *serverFilter) message(t byte) error {
	if _, err := f.w.Write([]byte{t}); err != nil {
		return err
	}
	switch t {
	case msgFramebufferUpdate:
		b, err := f.read(3, "FramebufferUpdate", false)
		if err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint16(b[1:3]))
		pf := f.s.pixelFormat()
		for range n {
			last, err := f.rect(pf)
			if err != nil || last {
				return err
			}
		}
		return nil
	case msgSetColourMapEntries:
		b, err := f.read(5, "SetColourMapEntries", false)
		if err != nil {
			return err
		}
		return f.copy(6*int64(binary.BigEndian.Uint16(b[3:5])), "SetColourMapEntries")
	case msgBell:
		return nil
	}
	return refusef("server message type %d (%s) is not passed to view clients", t, serverMessageName(t))
}

// rect forwards one rectangle; last reports a LastRect, which ends the update.
func (f *serverFilter) rect(pf []byte) (last bool, err error) {
	b, err := f.read(12, "rectangle", false)
	if err != nil {
		return false, err
	}
	w, h := int64(binary.BigEndian.Uint16(b[4:6])), int64(binary.BigEndian.Uint16(b[6:8]))
	enc := int32(binary.BigEndian.Uint32(b[8:12]))
	bpp := int64(pf[0] / 8)
	switch enc {
	case encRaw:
		return false, f.copy(w*h*bpp, "Raw rectangle")
	case encCopyRect:
		return false, f.copy(4, "CopyRect rectangle")
	case encRRE:
		b, err := f.read(4, "RRE rectangle", false)
		if err != nil {
			return false, err
		}
		return false, f.copy(bpp+int64(binary.BigEndian.Uint32(b))*(bpp+8), "RRE rectangle")
	case encHextile:
		return false, f.hextile(w, h, bpp)
	case encZRLE:
		b, err := f.read(4, "ZRLE rectangle", false)
		if err != nil {
			return false, err
		}
		return false, f.copy(int64(binary.BigEndian.Uint32(b)), "ZRLE rectangle")
	case encTight, encTightPNG:
		return false, f.tight(w, h, pf)
	case encDesktopSize:
		return false, nil
	case encLastRect:
		return true, nil
	case encCursor:
		return false, f.copy(w*h*bpp+(w+7)/8*h, "Cursor")
	case encXCursor:
		if w*h == 0 {
			return false, nil
		}
		return false, f.copy(6+2*((w+7)/8)*h, "XCursor")
	case encDesktopName:
		b, err := f.read(4, "DesktopName", false)
		if err != nil {
			return false, err
		}
		n := binary.BigEndian.Uint32(b)
		if n > maxServerString {
			return false, refusef("server desktop name of %d bytes is over the edge's limit of %d", n, maxServerString)
		}
		return false, f.copy(int64(n), "DesktopName")
	case encExtendedDesktopSize:
		b, err := f.read(4, "ExtendedDesktopSize", false)
		if err != nil {
			return false, err
		}
		return false, f.copy(16*int64(b[0]), "ExtendedDesktopSize")
	}
	return false, refusef("server rectangle encoding %d is not one the edge lets view clients use", enc)
}

// hextile forwards a Hextile rectangle, tile by tile (RFC 6143 §7.7.4).
func (f *serverFilter) hextile(w, h, bpp int64) error {
	for ty := int64(0); ty < h; ty += 16 {
		for tx := int64(0); tx < w; tx += 16 {
			tw, th := min(16, w-tx), min(16, h-ty)
			b, err := f.read(1, "Hextile tile", false)
			if err != nil {
				return err
			}
			sub := b[0]
			if sub&1 != 0 { // Raw
				if err := f.copy(tw*th*bpp, "Hextile tile"); err != nil {
					return err
				}
				continue
			}
			n := int64(0)
			if sub&2 != 0 { // BackgroundSpecified
				n += bpp
			}
			if sub&4 != 0 { // ForegroundSpecified
				n += bpp
			}
			if err := f.copy(n, "Hextile tile"); err != nil {
				return err
			}
			if sub&8 == 0 { // no subrects
				continue
			}
			b, err = f.read(1, "Hextile subrects", false)
			if err != nil {
				return err
			}
			each := int64(2)
			if sub&16 != 0 { // SubrectsColoured
				each += bpp
			}
			if err := f.copy(int64(b[0])*each, "Hextile subrects"); err != nil {
				return err
			}
		}
	}
	return nil
}

// tight forwards a Tight or TightPNG rectangle (the framing of TigerVNC's and noVNC's decoders).
func (f *serverFilter) tight(w, h int64, pf []byte) error {
	tpixel := int64(pf[0] / 8)
	if is888(pf) {
		tpixel = 3
	}
	b, err := f.read(1, "Tight rectangle", false)
	if err != nil {
		return err
	}
	ctl := b[0] >> 4
	switch {
	case ctl == 0x8: // fill
		return f.copy(tpixel, "Tight fill")
	case ctl == 0x9 || ctl == 0xa: // JPEG, PNG
		return f.compact("Tight image")
	case ctl > 0xa:
		return refusef("server Tight compression control %#x is not defined", b[0])
	}
	row := w * tpixel
	if b[0]&0x40 != 0 { // explicit filter
		b, err := f.read(1, "Tight filter", false)
		if err != nil {
			return err
		}
		switch b[0] {
		case 0, 2: // copy, gradient
		case 1: // palette
			b, err := f.read(1, "Tight palette", false)
			if err != nil {
				return err
			}
			colours := int64(b[0]) + 1
			if err := f.copy(colours*tpixel, "Tight palette"); err != nil {
				return err
			}
			row = w
			if colours == 2 {
				row = (w + 7) / 8
			}
		default:
			return refusef("server Tight filter %d is not defined", b[0])
		}
	}
	if size := row * h; size < 12 {
		return f.copy(size, "Tight data")
	}
	return f.compact("Tight data")
}

// compact forwards a Tight compact length (1 to 3 bytes) and the data it counts.
func (f *serverFilter) compact(name string) error {
	var n int64
	for i := range 3 {
		b, err := f.read(1, name, false)
		if err != nil {
			return err
		}
		if i == 2 {
			n |= int64(b[0]) << 14
			break
		}
		n |= int64(b[0]&0x7f) << (7 * i)
		if b[0]&0x80 == 0 {
			break
		}
	}
	return f.copy(n, name)
}

// is888 reports whether pixels of pf travel in Tight as 3 bytes (TigerVNC's PixelFormat::is888).
func is888(pf []byte) bool {
	return pf[3] != 0 && pf[0] == 32 && pf[1] == 24 &&
		binary.BigEndian.Uint16(pf[4:]) == 255 && binary.BigEndian.Uint16(pf[6:]) == 255 && binary.BigEndian.Uint16(pf[8:]) == 255 &&
		pf[10]%8 == 0 && pf[11]%8 == 0 && pf[12]%8 == 0
}

func serverMessageName(t byte) string {
	switch t {
	case 150:
		return "EndOfContinuousUpdates"
	case 248:
		return "ServerFence"
	case 250:
		return "xvp"
	case 255:
		return "QEMU"
	}
	return "unknown"
}
