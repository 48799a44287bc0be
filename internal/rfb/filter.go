package rfb

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// Stats counts what one filtered stream did with the client's messages after
// the handshake, for tests and metrics.
type Stats struct {
	// Passed counts messages forwarded to the server.
	Passed int
	// Dropped counts input messages withheld because the client is in View mode.
	Dropped int
	// StrippedEncodings counts encodings removed from SetEncodings lists.
	StrippedEncodings int
}

// Filter copies the client→server stream from src to dst message by message
// until src ends (returns nil on a clean EOF at a message boundary) or fails.
// A refused stream returns an error wrapping ErrProtocol; a stream cut inside
// a message returns one wrapping io.ErrUnexpectedEOF. Messages accepted before
// a failure are still delivered. Any mode other than Control is treated as View.
func Filter(dst io.Writer, src io.Reader, mode Mode) error {
	_, err := FilterWithStats(dst, src, mode)
	return err
}

// FilterWithStats is Filter that also reports what it passed, dropped and stripped.
func FilterWithStats(dst io.Writer, src io.Reader, mode Mode) (Stats, error) {
	return NewSession(mode).FilterClient(dst, src)
}

// FilterClient is FilterWithStats for the client half of s, recording what
// FilterServer needs to frame the other half.
func (s *Session) FilterClient(dst io.Writer, src io.Reader) (Stats, error) {
	defer s.clientDone()
	f := &filter{
		p:    parser{r: bufio.NewReader(src)},
		w:    bufio.NewWriter(dst),
		mode: s.mode,
		s:    s,
	}
	err := f.run()
	if ferr := f.w.Flush(); ferr != nil && err == nil {
		err = fmt.Errorf("write server: %w", ferr)
	}
	return f.stats, err
}

// filter holds one stream's state: the parser on the client side, a batching
// writer on the server side, and what has been done so far.
type filter struct {
	p     parser
	w     *bufio.Writer
	mode  Mode
	s     *Session
	stats Stats
}

func (f *filter) run() error {
	minor, v, err := f.p.version()
	if err != nil {
		return clean(err)
	}
	f.s.setClientVersion(minor)
	if err := f.send(v); err != nil {
		return err
	}
	if minor >= 7 {
		sec, err := f.p.securityType()
		if err != nil {
			return clean(err)
		}
		if err := f.send(sec); err != nil {
			return err
		}
	}
	if _, err := f.p.clientInit(); err != nil {
		return clean(err)
	}
	// Always shared: an exclusive ClientInit would make Xvnc disconnect
	// everyone else, which no client of the edge may do.
	if err := f.send([]byte{1}); err != nil {
		return err
	}
	for {
		m, err := f.p.message()
		if err != nil {
			return clean(err)
		}
		switch m[0] {
		case msgKeyEvent, msgPointerEvent, msgClientCutText, msgSetDesktopSize:
			if f.mode != Control {
				f.stats.Dropped++
				if err := f.flushIfIdle(); err != nil {
					return err
				}
				continue
			}
		case msgSetEncodings:
			var stripped int
			m, stripped = stripEncodings(m, f.mode)
			f.stats.StrippedEncodings += stripped
		case msgSetPixelFormat:
			if err := f.s.setPixelFormat(m[4:20]); err != nil {
				return err
			}
		case msgFramebufferUpdateRequest:
			f.s.markRequested()
		}
		if err := f.send(m); err != nil {
			return err
		}
		f.stats.Passed++
	}
}

// send forwards one step or message, flushing when the client has nothing
// more buffered: a pointer move must not wait for the next one.
func (f *filter) send(b []byte) error {
	if _, err := f.w.Write(b); err != nil {
		return fmt.Errorf("write server: %w", err)
	}
	return f.flushIfIdle()
}

func (f *filter) flushIfIdle() error {
	if f.p.r.Buffered() > 0 {
		return nil
	}
	if err := f.w.Flush(); err != nil {
		return fmt.Errorf("write server: %w", err)
	}
	return nil
}

// clean turns the parser's clean end into Filter's nil.
func clean(err error) error {
	if err == io.EOF {
		return nil
	}
	return err
}

// stripEncodings removes from a SetEncodings message, in place, every
// encoding the edge does not allow in mode, and rewrites the count.
func stripEncodings(m []byte, mode Mode) ([]byte, int) {
	out := m[:4]
	for i := 4; i+4 <= len(m); i += 4 {
		if allowedEncoding(int32(binary.BigEndian.Uint32(m[i:])), mode) {
			out = append(out, m[i:i+4]...)
		}
	}
	binary.BigEndian.PutUint16(out[2:4], uint16((len(out)-4)/4))
	return out, (len(m) - len(out)) / 4
}

// allowedEncoding reports whether the edge lets the server use encoding e in
// mode. Anything that would let the server start an exchange whose client
// replies the edge refuses (Fence, ContinuousUpdates, QEMU keys, xvp, the
// extended clipboard) is left out, so a well-behaved client never sends them.
// View clients get only what FilterServer can frame, which leaves out TRLE.
func allowedEncoding(e int32, mode Mode) bool {
	switch e {
	case 15: // TRLE
		return mode == Control
	case 0, 1, 2, 5, 7, 16: // Raw, CopyRect, RRE, Hextile, Tight, ZRLE
		return true
	case -260, -223, -224: // TightPNG, DesktopSize, LastRect
		return true
	case -239, -240, -307, -308: // Cursor, XCursor, DesktopName, ExtendedDesktopSize
		return true
	}
	return e >= -256 && e <= -247 || // CompressionLevel 0..9
		e >= -32 && e <= -23 // QualityLevel 0..9
}
