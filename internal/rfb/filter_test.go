package rfb_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/rfb"
)

// Wire builders for client messages, written from RFC 6143 independently of the parser.

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func u16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func pixelFormat(bpp, depth, bigEndian, trueColour byte, pad byte) []byte {
	bits := depth / 3
	if depth == 24 {
		bits = 8
	}
	m := uint16(1)<<bits - 1
	return cat([]byte{0, pad, pad, pad, bpp, depth, bigEndian, trueColour}, u16(m), u16(m), u16(m),
		[]byte{0, bits, 2 * bits, pad, pad, pad})
}

func setEncodings(pad byte, encs ...int32) []byte {
	b := cat([]byte{2, pad}, u16(uint16(len(encs))))
	for _, e := range encs {
		b = append(b, u32(uint32(e))...)
	}
	return b
}

func fbur(incremental byte, x, y, w, h uint16) []byte {
	return cat([]byte{3, incremental}, u16(x), u16(y), u16(w), u16(h))
}

func keyEvent(down byte, pad byte, key uint32) []byte {
	return cat([]byte{4, down, pad, pad}, u32(key))
}

func pointer(mask byte, x, y uint16) []byte { return cat([]byte{5, mask}, u16(x), u16(y)) }

func cutText(pad byte, text string) []byte {
	return cat([]byte{6, pad, pad, pad}, u32(uint32(len(text))), []byte(text))
}

func setDesktopSize(pad byte, w, h uint16, screens int) []byte {
	b := cat([]byte{251, pad}, u16(w), u16(h), []byte{byte(screens), pad})
	for i := range screens {
		b = cat(b, u32(uint32(i)), u16(0), u16(0), u16(w), u16(h), u32(0))
	}
	return b
}

const (
	v38 = "RFB 003.008\n"
	v37 = "RFB 003.007\n"
	v33 = "RFB 003.003\n"
)

// hello is a 3.8 handshake choosing None and asking for exclusive access;
// helloOut is what the server must see.
var (
	hello    = []byte(v38 + "\x01\x00")
	helloOut = []byte(v38 + "\x01\x01")
)

func run(t *testing.T, in []byte, mode rfb.Mode) ([]byte, rfb.Stats, error) {
	t.Helper()
	var out bytes.Buffer
	st, err := rfb.FilterWithStats(&out, bytes.NewReader(in), mode)
	return out.Bytes(), st, err
}

func TestFilterMessages(t *testing.T) {
	pf := pixelFormat(32, 24, 0, 1, 0)
	tests := []struct {
		name string
		in   []byte // after hello
		view []byte // expected after helloOut in View mode
		ctrl []byte // expected after helloOut in Control mode
	}{
		{"set pixel format", pf, pf, pf},
		{"set pixel format padding zeroed", pixelFormat(8, 8, 0, 1, 0xee), pixelFormat(8, 8, 0, 1, 0), pixelFormat(8, 8, 0, 1, 0)},
		{"colour map pixel format", pixelFormat(8, 8, 1, 0, 0), pixelFormat(8, 8, 1, 0, 0), pixelFormat(8, 8, 1, 0, 0)},
		{"set encodings known", setEncodings(0, 7, 16, 0, -223), setEncodings(0, 7, 16, 0, -223), setEncodings(0, 7, 16, 0, -223)},
		{"set encodings empty", setEncodings(0), setEncodings(0), setEncodings(0)},
		{"set encodings stripped", setEncodings(9, 1, -312, 21, 16, -313, -1063131698, -258, -247, -23, -256, -32),
			setEncodings(0, 1, 16, -247, -23, -256, -32), setEncodings(0, 1, 16, -247, -23, -256, -32)},
		{"set encodings all stripped", setEncodings(0, -312, -313), setEncodings(0), setEncodings(0)},
		{"framebuffer update request", fbur(1, 0, 0, 1280, 800), fbur(1, 0, 0, 1280, 800), fbur(1, 0, 0, 1280, 800)},
		{"key event", keyEvent(1, 7, 0xff0d), nil, keyEvent(1, 0, 0xff0d)},
		{"pointer event", pointer(1, 100, 200), nil, pointer(1, 100, 200)},
		{"client cut text", cutText(3, "héllo"), nil, cutText(0, "héllo")},
		{"client cut text empty", cutText(0, ""), nil, cutText(0, "")},
		{"client cut text at limit", cutText(0, strings.Repeat("x", 1<<20)), nil, cutText(0, strings.Repeat("x", 1<<20))},
		{"set desktop size", setDesktopSize(5, 1920, 1080, 2), nil, setDesktopSize(0, 1920, 1080, 2)},
		{"set desktop size no screens", setDesktopSize(0, 800, 600, 0), nil, setDesktopSize(0, 800, 600, 0)},
		{"mixed", cat(fbur(0, 0, 0, 10, 10), pointer(0, 1, 1), keyEvent(0, 0, 'a'), fbur(1, 0, 0, 10, 10)),
			cat(fbur(0, 0, 0, 10, 10), fbur(1, 0, 0, 10, 10)),
			cat(fbur(0, 0, 0, 10, 10), pointer(0, 1, 1), keyEvent(0, 0, 'a'), fbur(1, 0, 0, 10, 10))},
	}
	for _, tt := range tests {
		for _, mode := range []rfb.Mode{rfb.View, rfb.Control} {
			want := tt.view
			if mode == rfb.Control {
				want = tt.ctrl
			}
			t.Run(tt.name+modeName(mode), func(t *testing.T) {
				out, _, err := run(t, cat(hello, tt.in), mode)
				if err != nil {
					t.Fatalf("Filter: %v", err)
				}
				if want := cat(helloOut, want); !bytes.Equal(out, want) {
					t.Fatalf("output\n got %x\nwant %x", trim(out), trim(want))
				}
			})
		}
	}
}

func modeName(m rfb.Mode) string {
	if m == rfb.Control {
		return "/control"
	}
	return "/view"
}

func trim(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

func TestFilterStats(t *testing.T) {
	in := cat(hello, setEncodings(0, 7, -312, -313), pointer(0, 1, 1), keyEvent(1, 0, 'a'), fbur(1, 0, 0, 1, 1), cutText(0, "x"))
	for mode, want := range map[rfb.Mode]rfb.Stats{
		rfb.View:    {Passed: 2, Dropped: 3, StrippedEncodings: 2},
		rfb.Control: {Passed: 5, Dropped: 0, StrippedEncodings: 2},
	} {
		_, st, err := run(t, in, mode)
		if err != nil || st != want {
			t.Errorf("mode %d: stats %+v, %v; want %+v", mode, st, err, want)
		}
	}
}

func TestFilterHandshake(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"3.8 exclusive forced shared", v38 + "\x01\x00", v38 + "\x01\x01"},
		{"3.8 shared", v38 + "\x01\x01", v38 + "\x01\x01"},
		{"3.8 odd shared flag", v38 + "\x01\x7f", v38 + "\x01\x01"},
		{"3.7", v37 + "\x01\x00", v37 + "\x01\x01"},
		{"3.3 has no security byte", v33 + "\x00", v33 + "\x01"},
		{"empty stream", "", ""},
		{"ends after version", v38, v38},
		{"ends after security", v38 + "\x01", v38 + "\x01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, mode := range []rfb.Mode{rfb.View, rfb.Control} {
				out, _, err := run(t, []byte(tt.in), mode)
				if err != nil || string(out) != tt.want {
					t.Fatalf("mode %d: got %q, %v; want %q, nil", mode, out, err, tt.want)
				}
			}
		})
	}
}

func TestFilterRefuses(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		wantErr error
		reason  string // must appear in the error text
		wantOut []byte // what reached the server before the refusal
	}{
		{"version 3.889", []byte("RFB 003.889\n\x01\x00"), rfb.ErrProtocol, `"RFB 003.889\n" is not supported`, nil},
		{"version 4.1", []byte("RFB 004.001\n\x01\x00"), rfb.ErrProtocol, "not supported", nil},
		{"not rfb", []byte("GET / HTTP/1.1\r\n"), rfb.ErrProtocol, "not supported", nil},
		{"vnc auth", []byte(v38 + "\x02"), rfb.ErrProtocol, "rfb: protocol violation: security type 2 (VNC auth) is not offered; the edge allows only None", []byte(v38)},
		{"vencrypt", []byte(v37 + "\x13"), rfb.ErrProtocol, "security type 19 (VeNCrypt)", []byte(v37)},
		{"invalid security", []byte(v38 + "\x00"), rfb.ErrProtocol, "security type 0", []byte(v38)},
		{"fence", cat(hello, fbur(1, 0, 0, 1, 1), []byte{248, 0, 0, 0}, u32(0), []byte{0}), rfb.ErrProtocol, "type 248 (Fence)", cat(helloOut, fbur(1, 0, 0, 1, 1))},
		{"continuous updates", cat(hello, []byte{150, 1}, u16(0), u16(0), u16(1), u16(1)), rfb.ErrProtocol, "type 150 (EnableContinuousUpdates)", helloOut},
		{"qemu", cat(hello, []byte{255, 0}, u16(1), u32(0), u32(0)), rfb.ErrProtocol, "type 255 (QEMU)", helloOut},
		{"unknown type", cat(hello, []byte{1}), rfb.ErrProtocol, "type 1 (unknown)", helloOut},
		{"cut text over limit", cat(hello, []byte{6, 0, 0, 0}, u32(1<<20+1)), rfb.ErrProtocol, "over the edge's limit", helloOut},
		{"extended clipboard", cat(hello, []byte{6, 0, 0, 0}, u32(0xfffffff0)), rfb.ErrProtocol, "negative length", helloOut},
		{"huge encoding count", cat(hello, []byte{2, 0}, u16(1025)), rfb.ErrProtocol, "1025 encodings", helloOut},
		{"bad bits per pixel", cat(hello, pixelFormat(24, 24, 0, 1, 0)), rfb.ErrProtocol, "bits-per-pixel 24", helloOut},
		{"bad true colour", cat(hello, pixelFormat(32, 24, 0, 2, 0)), rfb.ErrProtocol, "true-colour 2", helloOut},
		{"depth over bpp", cat(hello, pixelFormat(16, 24, 0, 1, 0)), rfb.ErrProtocol, "depth 24", helloOut},
		{"truncated version", []byte("RFB 00"), io.ErrUnexpectedEOF, "protocol version", nil},
		{"type byte only", cat(hello, []byte{5}), io.ErrUnexpectedEOF, "PointerEvent", helloOut},
		{"encodings without list", cat(hello, []byte{2, 0}, u16(2)), io.ErrUnexpectedEOF, "SetEncodings", helloOut},
		{"truncated pointer", cat(hello, pointer(1, 2, 3)[:4]), io.ErrUnexpectedEOF, "PointerEvent", helloOut},
		{"truncated encodings", cat(hello, setEncodings(0, 7, 16)[:9]), io.ErrUnexpectedEOF, "SetEncodings", helloOut},
		{"truncated cut text", cat(hello, cutText(0, "hello")[:10]), io.ErrUnexpectedEOF, "ClientCutText", helloOut},
		{"truncated desktop size", cat(hello, setDesktopSize(0, 1, 1, 1)[:12]), io.ErrUnexpectedEOF, "SetDesktopSize", helloOut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, mode := range []rfb.Mode{rfb.View, rfb.Control} {
				out, _, err := run(t, tt.in, mode)
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("mode %d: err %v, want %v", mode, err, tt.wantErr)
				}
				if tt.wantErr == io.ErrUnexpectedEOF && errors.Is(err, rfb.ErrProtocol) {
					t.Fatalf("truncation reported as a protocol violation: %v", err)
				}
				if !strings.Contains(err.Error(), tt.reason) {
					t.Fatalf("err %q does not say %q", err, tt.reason)
				}
				if !bytes.Equal(out, tt.wantOut) {
					t.Fatalf("server saw %q, want %q", out, tt.wantOut)
				}
			}
		})
	}
}

// noVNC's opening as it sends it to a 24-bit server (rfb.js _negotiateServerInit, _sendEncodings).
func noVNCSession() (in, view, ctrl []byte) {
	pf := pixelFormat(32, 24, 0, 1, 0)
	encs := setEncodings(0, 1, 7, -260, 16, 21, 5, 2, 0, -32+6, -256+2, -223, -224, -258, -261,
		-308, -309, -312, -313, -307, -1063131698, 0x574d5664, -239)
	kept := setEncodings(0, 1, 7, -260, 16, 5, 2, 0, -32+6, -256+2, -223, -224, -308, -307, -239)
	var moves, fburs []byte
	for i := range 20 {
		moves = cat(moves, pointer(0, uint16(100+i), uint16(200+2*i)))
		fburs = cat(fburs, fbur(1, 0, 0, 1280, 800))
	}
	in = cat(hello, pf, encs, fbur(0, 0, 0, 1280, 800), fburs, moves, pointer(1, 119, 238), pointer(0, 119, 238),
		keyEvent(1, 0, 'h'), keyEvent(0, 0, 'h'), fbur(1, 0, 0, 1280, 800))
	view = cat(helloOut, pf, kept, fbur(0, 0, 0, 1280, 800), fburs, fbur(1, 0, 0, 1280, 800))
	ctrl = cat(helloOut, pf, kept, fbur(0, 0, 0, 1280, 800), fburs, moves, pointer(1, 119, 238), pointer(0, 119, 238),
		keyEvent(1, 0, 'h'), keyEvent(0, 0, 'h'), fbur(1, 0, 0, 1280, 800))
	return in, view, ctrl
}

func TestFilterNoVNCSession(t *testing.T) {
	in, view, ctrl := noVNCSession()
	for mode, want := range map[rfb.Mode][]byte{rfb.View: view, rfb.Control: ctrl} {
		// One byte per read as well as all at once: framing must not depend on chunking.
		for _, src := range []io.Reader{bytes.NewReader(in), &oneByteReader{in}} {
			var out bytes.Buffer
			if err := rfb.Filter(&out, src, mode); err != nil {
				t.Fatalf("mode %d: %v", mode, err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Fatalf("mode %d: output differs\n got %x\nwant %x", mode, out.Bytes(), want)
			}
		}
	}
}

type oneByteReader struct{ b []byte }

func (r *oneByteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = r.b[0]
	r.b = r.b[1:]
	return 1, nil
}

type countingIO struct {
	io.Reader
	reads, writes int
	out           bytes.Buffer
}

func (c *countingIO) Read(p []byte) (int, error) { c.reads++; return c.Reader.Read(p) }
func (c *countingIO) Write(p []byte) (int, error) {
	c.writes++
	return c.out.Write(p)
}

// A burst that arrives at once goes out in one write, read in few reads.
func TestFilterBatches(t *testing.T) {
	in, _, want := noVNCSession()
	c := &countingIO{Reader: bytes.NewReader(in)}
	if err := rfb.Filter(c, c, rfb.Control); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c.out.Bytes(), want) {
		t.Fatal("output differs")
	}
	if c.writes != 1 || c.reads > 2 {
		t.Fatalf("%d reads, %d writes for %d bytes; want <=2 reads, 1 write", c.reads, c.writes, len(in))
	}
}

// A message is delivered as soon as the client has nothing more buffered,
// without waiting for the next one.
func TestFilterFlushesWhenIdle(t *testing.T) {
	pr, pw := io.Pipe()
	writes := make(chan []byte, 16)
	done := make(chan error, 1)
	go func() { done <- rfb.Filter(chanWriter(writes), pr, rfb.Control) }()

	expect := func(want []byte) {
		t.Helper()
		var got []byte
		deadline := time.After(5 * time.Second)
		for !bytes.Equal(got, want) {
			select {
			case b := <-writes:
				got = append(got, b...)
			case <-deadline:
				t.Fatalf("server saw %x, want %x", got, want)
			}
		}
	}
	for _, step := range [][2][]byte{
		{[]byte(v38), []byte(v38)},
		{{1}, {1}},
		{{0}, {1}},
		{pointer(0, 5, 5), pointer(0, 5, 5)},
		{cat(keyEvent(1, 0, 'a'), pointer(0, 6, 6)), cat(keyEvent(1, 0, 'a'), pointer(0, 6, 6))},
	} {
		if _, err := pw.Write(step[0]); err != nil {
			t.Fatal(err)
		}
		expect(step[1])
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type chanWriter chan []byte

func (c chanWriter) Write(p []byte) (int, error) {
	c <- bytes.Clone(p)
	return len(p), nil
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

func TestFilterWriteError(t *testing.T) {
	err := rfb.Filter(failWriter{}, bytes.NewReader(hello), rfb.View)
	if err == nil || !strings.Contains(err.Error(), "write server: broken pipe") {
		t.Fatalf("err %v, want write server: broken pipe", err)
	}
}
