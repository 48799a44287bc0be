package rfb_test

import (
	"bytes"
	"crypto/des"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/rfb"
)

// A viewer's and a server's side of the handshake, written from RFC 6143 independently of
// gate.go, over unbuffered pipes: a gate that read past a step would take the next one's bytes.

const password = "K7PQ2XAB"

// vncResponse is the viewer's answer to challenge: DES with the password as key, each key
// byte's bits in the reverse order.
func vncResponse(t *testing.T, pw string, challenge []byte) []byte {
	key := make([]byte, 8)
	copy(key, pw)
	for i, b := range key {
		var r byte
		for bit := range 8 {
			if b&(1<<bit) != 0 {
				r |= 0x80 >> bit
			}
		}
		key[i] = r
	}
	c, err := des.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 16)
	c.Encrypt(out[:8], challenge[:8])
	c.Encrypt(out[8:], challenge[8:])
	return out
}

// viewerEnd is what a viewer saw of the gate's handshake.
type viewerEnd struct {
	result  uint32 // SecurityResult; 0 passed
	reason  string // with a failed 3.8 result, or a refusal before the types
	refused bool   // the gate offered no security type
	closed  bool   // the gate closed before a SecurityResult
}

// pipeConn is one end of an unbuffered pipe with a deadline, so a hang fails the test.
func pipeConn(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	deadline := time.Now().Add(10 * time.Second)
	_ = a.SetDeadline(deadline)
	_ = b.SetDeadline(deadline)
	t.Cleanup(func() { _, _ = a.Close(), b.Close() })
	return a, b
}

func readFull(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

func readString(t *testing.T, r io.Reader) string {
	t.Helper()
	n := binary.BigEndian.Uint32(readFull(t, r, 4))
	return string(readFull(t, r, int(n)))
}

// view runs a viewer's handshake on conn: it sends version, chooses choose (3.7 and 3.8) and
// answers the challenge with pw.
func view(t *testing.T, conn net.Conn, version string, choose byte, pw string) viewerEnd {
	t.Helper()
	if v := readFull(t, conn, 12); string(v) != "RFB 003.008\n" {
		t.Fatalf("gate version %q", v)
	}
	if _, err := io.WriteString(conn, version); err != nil {
		t.Fatal(err)
	}
	version = speaks(version)
	if version == v33 {
		switch typ := binary.BigEndian.Uint32(readFull(t, conn, 4)); typ {
		case 0:
			return viewerEnd{refused: true, reason: readString(t, conn)}
		case 2:
		default:
			t.Fatalf("gate chose security type %d for a 3.3 viewer", typ)
		}
	} else {
		n := readFull(t, conn, 1)[0]
		if n == 0 {
			return viewerEnd{refused: true, reason: readString(t, conn)}
		}
		if types := readFull(t, conn, int(n)); !bytes.Equal(types, []byte{2}) {
			t.Fatalf("gate offers %v, want only VNC Authentication", types)
		}
		if _, err := conn.Write([]byte{choose}); err != nil {
			t.Fatal(err)
		}
		if choose != 2 {
			return readResult(t, conn, version)
		}
	}
	challenge := readFull(t, conn, 16)
	if _, err := conn.Write(vncResponse(t, pw, challenge)); err != nil {
		t.Fatal(err)
	}
	return readResult(t, conn, version)
}

// speaks is the handshake a viewer's version gets: 3.7 and 3.8 their own, later ones 3.8's,
// and the versions RFC 6143 does not define 3.3's.
func speaks(version string) string {
	switch version {
	case v38, v37, v33:
		return version
	case "RFB 003.889\n":
		return v38
	}
	return v33
}

func readResult(t *testing.T, conn net.Conn, version string) viewerEnd {
	t.Helper()
	b := make([]byte, 4)
	if _, err := io.ReadFull(conn, b); err != nil {
		return viewerEnd{closed: true}
	}
	end := viewerEnd{result: binary.BigEndian.Uint32(b)}
	if end.result != 0 && version == v38 {
		end.reason = readString(t, conn)
	}
	return end
}

// serve runs a server's handshake speaking version and offering None, then reads want (the
// client's stream after the handshake) and sends after. It returns what it read.
func serve(conn net.Conn, version string, want int, after []byte) ([]byte, error) {
	if _, err := io.WriteString(conn, version); err != nil {
		return nil, err
	}
	v := make([]byte, 12)
	if _, err := io.ReadFull(conn, v); err != nil || string(v) != version {
		return nil, fmt.Errorf("client version %q: %v", v, err)
	}
	if version == v33 {
		if _, err := conn.Write(u32(1)); err != nil {
			return nil, err
		}
	} else {
		if _, err := conn.Write([]byte{2, 2, 1}); err != nil { // VNC auth and None
			return nil, err
		}
		choice := make([]byte, 1)
		if _, err := io.ReadFull(conn, choice); err != nil || choice[0] != 1 {
			return nil, fmt.Errorf("client chose %v: %v", choice, err)
		}
		if version == v38 {
			if _, err := conn.Write(u32(0)); err != nil {
				return nil, err
			}
		}
	}
	got := make([]byte, want)
	if _, err := io.ReadFull(conn, got); err != nil {
		return got, err
	}
	_, err := conn.Write(after)
	return got, err
}

// join is what cocoonbox desktop does with each viewer: authenticate it, connect to the server,
// admit it and relay the rest unchanged.
func join(g *rfb.Gate, viewer, server net.Conn) error {
	defer viewer.Close()
	p, err := g.Authenticate(viewer)
	if err != nil {
		return err
	}
	if err := rfb.ConnectNone(server); err != nil {
		_ = p.Refuse(err.Error())
		return err
	}
	if err := p.Admit(); err != nil {
		return err
	}
	go func() { _, _ = io.Copy(server, viewer); _ = server.Close() }()
	_, _ = io.Copy(viewer, server) // ends when the viewer leaves; the test checks the bytes
	return nil
}

func newGate(t *testing.T, maxFailures int) *rfb.Gate {
	t.Helper()
	g, err := rfb.NewGate(password, maxFailures)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGatePassesTheStream: a viewer of each version with the right password is admitted, and
// from ClientInit on both directions pass byte for byte, whichever version the server speaks.
func TestGatePassesTheStream(t *testing.T) {
	clientAfter := cat([]byte{0}, pixelFormat(32, 24, 0, 1, 0), setEncodings(0, 0, 16, -239), fbur(0, 0, 0, 64, 48), keyEvent(1, 0, 'a'))
	serverAfter := cat(u16(64), u16(48), pixelFormat(32, 24, 0, 1, 0)[4:], u32(4), []byte("desk"),
		update(cat(rectHdr(2, 2, 0), bytes.Repeat([]byte{7}, 16))), serverCut("clip"))
	for _, c := range []struct{ viewer, server string }{
		{v38, v38}, {v37, v38}, {v33, v38}, {"RFB 003.889\n", v38}, {"RFB 003.005\n", v38}, {v38, v33}, {v33, v37},
	} {
		t.Run(strings.TrimSpace(c.viewer)+" to "+strings.TrimSpace(c.server), func(t *testing.T) {
			g := newGate(t, 3)
			vGate, vEnd := pipeConn(t)
			sGate, sEnd := pipeConn(t)
			joined := make(chan error, 1)
			go func() { joined <- join(g, vGate, sGate) }()
			served := make(chan []byte, 1)
			go func() {
				got, err := serve(sEnd, c.server, len(clientAfter), serverAfter)
				if err != nil {
					t.Errorf("server: %v", err)
				}
				served <- got
			}()
			if end := view(t, vEnd, c.viewer, 2, password); end != (viewerEnd{}) {
				t.Fatalf("right password: %+v", end)
			}
			if _, err := vEnd.Write(clientAfter); err != nil {
				t.Fatal(err)
			}
			if got := readFull(t, vEnd, len(serverAfter)); !bytes.Equal(got, serverAfter) {
				t.Errorf("viewer got %x\nwant %x", got, serverAfter)
			}
			if got := <-served; !bytes.Equal(got, clientAfter) {
				t.Errorf("server got %x\nwant %x", got, clientAfter)
			}
			_ = vEnd.Close()
			if err := <-joined; err != nil {
				t.Errorf("join: %v", err)
			}
		})
	}
}

// TestGateRefusesWrongPassword: a wrong password fails the SecurityResult (with the reason for
// 3.8) before the server is reached, and the next viewer with the right one gets in.
func TestGateRefusesWrongPassword(t *testing.T) {
	g := newGate(t, 4)
	for _, version := range []string{v38, v37, v33} {
		vGate, vEnd := pipeConn(t)
		done := make(chan error, 1)
		go func() { _, err := g.Authenticate(vGate); _ = vGate.Close(); done <- err }()
		end := view(t, vEnd, version, 2, "K7PQ2XAC")
		want := viewerEnd{result: 1}
		if version == v38 {
			want.reason = "wrong password"
		}
		if end != want {
			t.Errorf("%q: %+v, want %+v", version, end, want)
		}
		if err := <-done; !errors.Is(err, rfb.ErrWrongPassword) {
			t.Errorf("%q: err %v, want ErrWrongPassword", version, err)
		}
	}
	vGate, vEnd := pipeConn(t)
	done := make(chan error, 1)
	go func() {
		p, err := g.Authenticate(vGate)
		if err == nil {
			err = p.Admit()
		}
		done <- err
	}()
	if end := view(t, vEnd, v38, 2, password); end != (viewerEnd{}) {
		t.Fatalf("right password after wrong ones: %+v", end)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestGateLocksAfterFailures: after its limit of wrong passwords the gate refuses every viewer,
// the right password too, with a reason each version shows.
func TestGateLocksAfterFailures(t *testing.T) {
	g := newGate(t, 2)
	for range 2 {
		vGate, vEnd := pipeConn(t)
		go func() { _, _ = g.Authenticate(vGate); _ = vGate.Close() }()
		view(t, vEnd, v38, 2, "wrong")
	}
	for _, version := range []string{v38, v33} {
		vGate, vEnd := pipeConn(t)
		done := make(chan error, 1)
		go func() { _, err := g.Authenticate(vGate); _ = vGate.Close(); done <- err }()
		end := view(t, vEnd, version, 2, password)
		if !end.refused || !strings.Contains(end.reason, "too many wrong passwords") {
			t.Errorf("%q after the limit: %+v", version, end)
		}
		if err := <-done; !errors.Is(err, rfb.ErrLocked) {
			t.Errorf("%q: err %v, want ErrLocked", version, err)
		}
	}
}

// TestGateLocksViewersAtTheChallenge: viewers that hold a challenge when the last try is spent
// are refused too, the right password included, so parallel viewers get no extra tries.
func TestGateLocksViewersAtTheChallenge(t *testing.T) {
	g := newGate(t, 1)
	challenged := func() (net.Conn, []byte, chan error) {
		vGate, vEnd := pipeConn(t)
		done := make(chan error, 1)
		go func() { _, err := g.Authenticate(vGate); _ = vGate.Close(); done <- err }()
		readFull(t, vEnd, 12)
		_, _ = io.WriteString(vEnd, v38)
		readFull(t, vEnd, 2)
		_, _ = vEnd.Write([]byte{2})
		return vEnd, readFull(t, vEnd, 16), done
	}
	a, aChallenge, aDone := challenged()
	b, bChallenge, bDone := challenged()
	_, _ = a.Write(vncResponse(t, "wrong", aChallenge))
	if end := readResult(t, a, v38); end.reason != "wrong password" {
		t.Fatalf("first viewer: %+v", end)
	}
	if err := <-aDone; !errors.Is(err, rfb.ErrWrongPassword) {
		t.Fatalf("first viewer: %v", err)
	}
	_, _ = b.Write(vncResponse(t, password, bChallenge))
	if end := readResult(t, b, v38); !strings.Contains(end.reason, "too many wrong passwords") {
		t.Fatalf("second viewer, right password after the last try: %+v", end)
	}
	if err := <-bDone; !errors.Is(err, rfb.ErrLocked) {
		t.Fatalf("second viewer: %v", err)
	}
}

// TestGateRefusesOtherSecurity: a viewer that chooses None is refused, with the reason for 3.8
// (which waits for a SecurityResult) and by closing for 3.7 (which does not); a stream that is
// not RFB 3 is refused.
func TestGateRefusesOtherSecurity(t *testing.T) {
	g := newGate(t, 3)
	for version, want := range map[string]viewerEnd{
		v38: {result: 1, reason: "security type 1 (None) is not offered: this server asks for the VNC password cocoonbox desktop printed"},
		v37: {closed: true},
	} {
		vGate, vEnd := pipeConn(t)
		done := make(chan error, 1)
		go func() { _, err := g.Authenticate(vGate); _ = vGate.Close(); done <- err }()
		if end := view(t, vEnd, version, 1, ""); end != want {
			t.Errorf("%q choosing None: %+v, want %+v", version, end, want)
		}
		if err := <-done; !errors.Is(err, rfb.ErrProtocol) {
			t.Errorf("%q: err %v, want ErrProtocol", version, err)
		}
	}
	vGate, vEnd := pipeConn(t)
	done := make(chan error, 1)
	go func() { _, err := g.Authenticate(vGate); _ = vGate.Close(); done <- err }()
	readFull(t, vEnd, 12)
	_, _ = io.WriteString(vEnd, "GET / HTTP/1.")
	if err := <-done; !errors.Is(err, rfb.ErrProtocol) || !strings.Contains(err.Error(), "not RFB 3.x") {
		t.Errorf("an HTTP client: %v", err)
	}
}

// TestGateRefuseAfterPassword: when the server cannot be reached, a viewer that gave the right
// password gets the reason in its SecurityResult.
func TestGateRefuseAfterPassword(t *testing.T) {
	g := newGate(t, 3)
	vGate, vEnd := pipeConn(t)
	go func() {
		if p, err := g.Authenticate(vGate); err == nil {
			_ = p.Refuse("the edge refused: box is hibernated")
		}
		_ = vGate.Close()
	}()
	if end := view(t, vEnd, v38, 2, password); end != (viewerEnd{result: 1, reason: "the edge refused: box is hibernated"}) {
		t.Fatalf("%+v", end)
	}
}

// TestConnectNoneRefusals: a server that refuses, offers no None or fails the result is an
// error carrying its reason.
func TestConnectNoneRefusals(t *testing.T) {
	for _, c := range []struct {
		name   string
		server []byte
		want   string
	}{
		{"no types", cat([]byte(v38), []byte{0}, u32(4), []byte("full")), "refused the connection: full"},
		{"3.3 refusal", cat([]byte(v33), u32(0), u32(4), []byte("busy")), "refused the connection: busy"},
		{"vnc auth only", cat([]byte(v38), []byte{1, 2}), "does not offer security type None"},
		{"3.3 vnc auth", cat([]byte(v33), u32(2)), "chose security type 2"},
		{"failed result", cat([]byte(v38), []byte{1, 1}, u32(1), u32(4), []byte("nope")), "failed the security handshake: nope"},
		{"version 4", []byte("RFB 004.000\n"), "server protocol version"},
		{"cut short", []byte(v38[:5]), "unexpected EOF"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var sent bytes.Buffer
			err := rfb.ConnectNone(struct {
				io.Reader
				io.Writer
			}{bytes.NewReader(c.server), &sent})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

// TestNewGateChecksPassword: VNC Authentication uses at most 8 bytes of a password.
func TestNewGateChecksPassword(t *testing.T) {
	for _, pw := range []string{"", "123456789"} {
		if _, err := rfb.NewGate(pw, 3); err == nil {
			t.Errorf("NewGate(%q) passed", pw)
		}
	}
	if _, err := rfb.NewGate(password, 0); err == nil {
		t.Error("NewGate with no tries passed")
	}
}
