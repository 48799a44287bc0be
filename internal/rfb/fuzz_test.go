package rfb

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"testing"
)

// FuzzFilter feeds arbitrary client streams through Filter and checks, with
// the package's own parser, that what reaches the server is a well-formed
// stream the edge would accept unchanged, that it is always shared, and that
// in View mode it carries no input.
func FuzzFilter(f *testing.F) {
	hello := []byte("RFB 003.008\n\x01\x00")
	f.Add(hello, false)
	f.Add([]byte("RFB 003.003\n\x00\x05\x01\x00\x10\x00\x20\x04\x01\x00\x00\x00\x00\xff\x0d"), false)
	f.Add([]byte("RFB 003.007\n\x02"), true)
	session := append(bytes.Clone(hello),
		0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 0, 8, 16, 0, 0, 0, // SetPixelFormat
		2, 0, 0, 4, 0, 0, 0, 7, 0xff, 0xff, 0xfe, 0xc8, 0xc0, 0xa1, 0xe5, 0xce, 0, 0, 0, 16, // SetEncodings
		3, 0, 0, 0, 0, 0, 5, 0, 3, 32, // FramebufferUpdateRequest
		5, 1, 0, 10, 0, 20, // PointerEvent
		4, 1, 0, 0, 0, 0, 0, 'a', // KeyEvent
		6, 0, 0, 0, 0, 0, 0, 2, 'h', 'i', // ClientCutText
		251, 0, 3, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 2, 0, 0, 0, 0, 0, // SetDesktopSize
	)
	f.Add(session, false)
	f.Add(session, true)
	f.Add(append(bytes.Clone(hello), 248, 0, 0, 0, 0, 0, 0, 0, 0), true)

	f.Fuzz(func(t *testing.T, in []byte, control bool) {
		mode := View
		if control {
			mode = Control
		}
		var out bytes.Buffer
		_ = Filter(&out, bytes.NewReader(in), mode)

		checkStream(t, out.Bytes(), mode)

		// The output is exactly what the edge forwards: filtering it again
		// changes nothing and ends cleanly.
		var again bytes.Buffer
		if err := Filter(&again, bytes.NewReader(out.Bytes()), mode); err != nil {
			t.Fatalf("refiltering output: %v\noutput %x", err, out.Bytes())
		}
		if !bytes.Equal(again.Bytes(), out.Bytes()) {
			t.Fatalf("refiltering changed output\nfirst  %x\nsecond %x", out.Bytes(), again.Bytes())
		}
	})
}

// checkStream parses what the server would see and fails on anything the
// edge must never forward.
func checkStream(t *testing.T, out []byte, mode Mode) {
	t.Helper()
	p := parser{r: bufio.NewReader(bytes.NewReader(out))}
	minor, _, err := p.version()
	if err != nil {
		if len(out) != 0 {
			t.Fatalf("output version: %v", err)
		}
		return
	}
	if minor >= 7 {
		if _, err := p.securityType(); err != nil {
			if len(out) != 12 {
				t.Fatalf("output security type: %v", err)
			}
			return
		}
	}
	init, err := p.clientInit()
	if err != nil {
		return // the client ended before ClientInit
	}
	if init[0] != 1 {
		t.Fatalf("server saw shared flag %d", init[0])
	}
	for {
		m, err := p.message()
		if err != nil {
			if err != io.EOF {
				t.Fatalf("output message: %v", err)
			}
			return
		}
		switch m[0] {
		case msgKeyEvent, msgPointerEvent, msgClientCutText, msgSetDesktopSize:
			if mode == View {
				t.Fatalf("View mode forwarded message type %d: %x", m[0], m)
			}
		case msgSetEncodings:
			for i := 4; i < len(m); i += 4 {
				if e := int32(binary.BigEndian.Uint32(m[i:])); !allowedEncoding(e, mode) {
					t.Fatalf("forwarded encoding %d", e)
				}
			}
		}
	}
}

// FuzzFilterServer feeds arbitrary server streams through a view session's server half, after
// a client half that chose 3.8 and, optionally, an 8-bit pixel format, and checks that what
// reaches the client frames again to itself with nothing left to drop: no clipboard message
// ever starts at a message boundary of what a view client sees.
func FuzzFilterServer(f *testing.F) {
	hello := []byte("RFB 003.008\n\x01\x01\x00\x00\x00\x00\x00\x10\x00\x10\x20\x18\x00\x01\x00\xff\x00\xff\x00\xff\x10\x08\x00\x00\x00\x00\x00\x00\x00\x04desk")
	f.Add(hello, false)
	f.Add(append(bytes.Clone(hello), 3, 0, 0, 0, 0, 0, 0, 2, 'h', 'i', 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 7, 0x80, 1, 2, 3), false)
	f.Add(append(bytes.Clone(hello), 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 0, 2, 0, 0, 0, 0, 1, 2, 3, 4), true)
	f.Fuzz(func(t *testing.T, server []byte, bpp8 bool) {
		client := []byte("RFB 003.008\n\x01\x01")
		if bpp8 {
			client = append(client, 0, 0, 0, 0, 8, 8, 0, 1, 0, 7, 0, 7, 0, 3, 0, 3, 6, 0, 0, 0)
		}
		filter := func(in []byte) ([]byte, ServerStats) {
			s := NewSession(View)
			if _, err := s.FilterClient(io.Discard, bytes.NewReader(client)); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			st, _ := s.FilterServer(&out, bytes.NewReader(in))
			return out.Bytes(), st
		}
		out, _ := filter(server)
		again, st := filter(out)
		if !bytes.Equal(again, out) || st.Dropped != 0 {
			t.Fatalf("refiltering the client's stream changed it or dropped %d\nfirst  %x\nsecond %x", st.Dropped, out, again)
		}
	})
}
