package rfb_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/rfb"
)

// Wire builders for server messages, from RFC 6143.

var serverHello = cat([]byte(v38), []byte{1, 1}, u32(0), // version, security None, result OK
	u16(64), u16(48), pixelFormat(32, 24, 0, 1, 0)[4:], u32(4), []byte("desk"))

func rectHdr(w, h uint16, enc int32) []byte {
	return cat(u16(0), u16(0), u16(w), u16(h), u32(uint32(enc)))
}

func update(rects ...[]byte) []byte {
	return cat([]byte{0, 0}, u16(uint16(len(rects))), cat(rects...))
}

func serverCut(text string) []byte {
	return cat([]byte{3, 0, 0, 0}, u32(uint32(len(text))), []byte(text))
}

// filterServer runs a client stream (hello, noVNC's pixel format and a request) through a
// session's client half, then server through its server half.
func filterServer(t *testing.T, mode rfb.Mode, server []byte) ([]byte, rfb.ServerStats, error) {
	t.Helper()
	s := rfb.NewSession(mode)
	if _, err := s.FilterClient(io.Discard, bytes.NewReader(cat(hello, pixelFormat(32, 24, 0, 1, 0), fbur(0, 0, 0, 64, 48)))); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	st, err := s.FilterServer(&out, bytes.NewReader(server))
	return out.Bytes(), st, err
}

// TestFilterServerDropsClipboard: a view client gets every kind of frame the edge lets it ask
// for, byte for byte, and none of the clipboard messages between them; a control client gets
// the stream untouched.
func TestFilterServerDropsClipboard(t *testing.T) {
	frames := [][]byte{
		update(cat(rectHdr(2, 2, 0), bytes.Repeat([]byte{7}, 16))),                                                                                 // Raw
		update(cat(rectHdr(2, 2, 1), u16(1), u16(1))),                                                                                              // CopyRect
		update(cat(rectHdr(4, 4, 2), u32(1), u32(0xff), u32(0xee), u16(0), u16(0), u16(1), u16(1))),                                                // RRE
		update(cat(rectHdr(20, 4, 5), []byte{1}, bytes.Repeat([]byte{1}, 16*4*4), []byte{2 | 8 | 16}, u32(5), []byte{1}, u32(9), []byte{0, 0x11})), // Hextile
		update(cat(rectHdr(8, 8, 16), u32(3), []byte{1, 2, 3})),                                                                                    // ZRLE
		update(cat(rectHdr(8, 8, 7), []byte{0x80, 1, 2, 3})),                                                                                       // Tight fill
		update(cat(rectHdr(8, 8, 7), []byte{0x90, 0x81, 0x01}, bytes.Repeat([]byte{9}, 129))),                                                      // Tight JPEG, 2-byte length
		update(cat(rectHdr(2, 1, 7), []byte{0x40, 1, 1}, bytes.Repeat([]byte{5}, 6), []byte{0x80})),                                                // Tight palette, 1 row of 1 byte
		update(cat(rectHdr(8, 8, -260), []byte{0xa0, 2, 0x89, 'P'})),                                                                               // TightPNG
		update(cat(rectHdr(2, 2, -239), bytes.Repeat([]byte{1}, 16), []byte{0xc0, 0xc0})),                                                          // Cursor
		update(cat(rectHdr(64, 48, -223)), cat(rectHdr(0, 0, -307), u32(3), []byte("new"))),                                                        // DesktopSize, DesktopName
		update(cat(rectHdr(64, 48, -308), []byte{1, 0, 0, 0}, bytes.Repeat([]byte{0}, 16))),                                                        // ExtendedDesktopSize
		cat([]byte{0, 0, 0xff, 0xff}, rectHdr(0, 0, -224)),                                                                                         // LastRect ends an open update
		cat([]byte{1, 0}, u16(0), u16(1), u16(1), u16(2), u16(3)),                                                                                  // SetColourMapEntries
		{2}, // Bell
	}
	clips := [][]byte{
		serverCut("the controller's password"),
		cat([]byte{3, 0, 0, 0}, u32(0xfffffffb), u32(1<<28), []byte{1}), // extended clipboard, 5 bytes
		serverCut(""),
	}
	server, want := bytes.Clone(serverHello), bytes.Clone(serverHello)
	for i, f := range frames {
		server = cat(server, f, clips[i%len(clips)])
		want = cat(want, f)
	}
	out, st, err := filterServer(t, rfb.View, server)
	if err != nil || !bytes.Equal(out, want) {
		t.Fatalf("view: %v\n got %x\nwant %x", err, out, want)
	}
	if st.Dropped != len(frames) || st.Passed != len(frames) || bytes.Contains(out, []byte("password")) {
		t.Fatalf("view stats %+v", st)
	}
	if out, _, err := filterServer(t, rfb.Control, server); err != nil || !bytes.Equal(out, server) {
		t.Fatalf("control: %v, output differs from the server's", err)
	}
	// Read one byte at a time: framing must not depend on chunking.
	s := rfb.NewSession(rfb.View)
	_, _ = s.FilterClient(io.Discard, bytes.NewReader(hello))
	var one bytes.Buffer
	if _, err := s.FilterServer(&one, &oneByteReader{server}); err != nil || !bytes.Equal(one.Bytes(), want) {
		t.Fatalf("one byte at a time: %v", err)
	}
}

// TestFilterServerRefuses: what a view client's edge cannot frame ends the stream, with what
// came before delivered.
func TestFilterServerRefuses(t *testing.T) {
	for _, c := range []struct {
		name    string
		server  []byte
		wantErr error
		reason  string
	}{
		{"fence", cat(serverHello, []byte{248, 0, 0, 0}, u32(0), []byte{0}), rfb.ErrProtocol, "type 248 (ServerFence)"},
		{"continuous updates", cat(serverHello, []byte{150}), rfb.ErrProtocol, "type 150"},
		{"trle", cat(serverHello, update(cat(rectHdr(1, 1, 15), []byte{1, 0, 0, 0}))), rfb.ErrProtocol, "encoding 15"},
		{"jpeg encoding", cat(serverHello, update(rectHdr(1, 1, 21))), rfb.ErrProtocol, "encoding 21"},
		{"tight control", cat(serverHello, update(cat(rectHdr(1, 1, 7), []byte{0xb0}))), rfb.ErrProtocol, "Tight compression control 0xb0"},
		{"huge name", cat([]byte(v38), []byte{1, 1}, u32(0), u16(1), u16(1), pixelFormat(32, 24, 0, 1, 0)[4:], u32(1<<30)), rfb.ErrProtocol, "desktop name"},
		{"bad server version", []byte("RFB 004.000\n"), rfb.ErrProtocol, "server protocol version"},
		{"vnc auth", cat([]byte(v38), []byte{1, 2}, u32(0)), nil, ""},
		{"truncated raw", cat(serverHello, update(cat(rectHdr(4, 4, 0), []byte{1, 2}))), io.ErrUnexpectedEOF, "Raw rectangle"},
		{"truncated clipboard", cat(serverHello, serverCut("secret")[:10]), io.ErrUnexpectedEOF, "ServerCutText"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := filterServer(t, rfb.View, c.server)
			if c.wantErr == nil {
				return // only must not panic
			}
			if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("err %v, want %v naming %q", err, c.wantErr, c.reason)
			}
			if bytes.Contains(out, []byte("secret")) {
				t.Fatalf("clipboard bytes reached the client: %q", out)
			}
		})
	}
}

// TestViewPixelFormatFixedAfterRequest: once updates are asked for, a view client may not
// change the pixel format (the edge could not tell which update uses which); repeating it is fine.
func TestViewPixelFormatFixedAfterRequest(t *testing.T) {
	pf := pixelFormat(32, 24, 0, 1, 0)
	in := cat(hello, pf, fbur(0, 0, 0, 1, 1), pf, pixelFormat(8, 8, 0, 1, 0))
	out, _, err := run(t, in, rfb.View)
	if !errors.Is(err, rfb.ErrProtocol) || !strings.Contains(err.Error(), "SetPixelFormat after the first FramebufferUpdateRequest") {
		t.Fatalf("err %v", err)
	}
	if want := cat(helloOut, pf, fbur(0, 0, 0, 1, 1), pf); !bytes.Equal(out, want) {
		t.Fatalf("server saw %x", out)
	}
	if _, _, err := run(t, in, rfb.Control); err != nil {
		t.Fatalf("control: %v", err)
	}
}

// countWriter counts what it is given, as the desktop edge's WebSocket writer takes each
// batch (not an io.ReaderFrom, unlike io.Discard).
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// BenchmarkFilterServerFrame: one full 1280x800 Raw frame at 32 bits per pixel through a view
// client's filter, the desktop's first frame as the edge relays it.
func BenchmarkFilterServerFrame(b *testing.B) {
	const w, h = 1280, 800
	server := cat(serverHello, update(cat(rectHdr(w, h, 0), bytes.Repeat([]byte{7}, w*h*4))))
	b.SetBytes(int64(len(server)))
	for b.Loop() {
		s := rfb.NewSession(rfb.View)
		if _, err := s.FilterClient(io.Discard, bytes.NewReader(cat(hello, pixelFormat(32, 24, 0, 1, 0), fbur(0, 0, 0, w, h)))); err != nil {
			b.Fatal(err)
		}
		var out countWriter
		if _, err := s.FilterServer(&out, bytes.NewReader(server)); err != nil || out.n != int64(len(server)) {
			b.Fatalf("filter: %v, %d of %d bytes", err, out.n, len(server))
		}
	}
}
