package devstack_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// fakeRFB is a minimal RFB 3.8 server for the box's 127.0.0.1:5900, standing in for Xvnc: it
// runs the handshake (security None), records the ClientInit byte and every byte after it to
// /tmp/rfb.<n>.in (one file per connection), and sends a ServerInit and then an empty
// FramebufferUpdate every 200 ms, so a client sees frames.
const fakeRFB = `
import itertools, socket, struct, threading, time

def read(c, n):
    b = b""
    while len(b) < n:
        x = c.recv(n - len(b))
        if not x:
            raise OSError("eof")
        b += x
    return b

def tick(c):
    try:
        while True:
            time.sleep(0.2)
            c.sendall(b"\x00\x00\x00\x00")
    except OSError:
        pass

def serve(c, n):
    try:
        c.sendall(b"RFB 003.008\n")
        read(c, 12)
        c.sendall(b"\x01\x01")
        read(c, 1)
        c.sendall(b"\x00\x00\x00\x00")
        f = open("/tmp/rfb.%d.in" % n, "wb", buffering=0)
        f.write(read(c, 1))
        c.sendall(struct.pack(">HHBBBBHHHBBBxxxI", 16, 16, 32, 24, 0, 1, 255, 255, 255, 16, 8, 0, 4) + b"fake")
        threading.Thread(target=tick, args=(c,), daemon=True).start()
        while True:
            b = c.recv(4096)
            if not b:
                break
            f.write(b)
    except OSError:
        pass
    finally:
        c.close()

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 5900))
s.listen(16)
open("/tmp/rfb.ready", "w").close()
count = itertools.count(1)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c, next(count)), daemon=True).start()
`

// Client messages the test sends after the handshake.
var (
	pointerEvent = []byte{5, 1, 0, 10, 0, 10}
	keyEvent     = []byte{4, 1, 0, 0, 0, 0, 0, 'a'}
	fbRequest    = []byte{3, 1, 0, 0, 0, 0, 0, 16, 0, 16}
)

// TestDesktopEdge opens a box's desktop through the edge against a fake RFB server in the box:
// view mode forces the shared flag and drops input; control mode needs the lease and passes
// input; one control connection per box; the viewers count follows the connections; bad
// credentials, a lost share and a broken stream are refused, and the box keeps working; a
// hibernated box is woken.
func TestDesktopEdge(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, eng := newBoxEnv(t, boxConfig(t), 5*time.Minute)
	id, ref := createBox(ctx, t, d, owner.ID, eng)
	mustExec(ctx, t, eng, ref, "cat > /tmp/fakerfb.py <<'EOF'\n"+fakeRFB+"\nEOF\n"+
		"nohup python3 /tmp/fakerfb.py >/dev/null 2>&1 &\n"+
		"for i in $(seq 100); do [ -e /tmp/rfb.ready ] && exit 0; sleep 0.1; done; exit 1")

	e, token := devAPI(t, d)
	ownerCtx := e.as(ctx, token)
	wsBase := "ws" + strings.TrimPrefix(d.URLs().API, "http")
	ticket := func(ctx context.Context, control bool) (*cbv1.DesktopTicketResponse, error) {
		return e.box.DesktopTicket(ctx, &cbv1.DesktopTicketRequest{Box: string(id), Control: control})
	}
	mustTicket := func(ctx context.Context, control bool) string {
		t.Helper()
		tk, err := ticket(ctx, control)
		if err != nil {
			t.Fatalf("desktop ticket (control %v): %v", control, err)
		}
		if left := time.Until(tk.GetExpiresAt().AsTime()); left <= 0 || left > time.Minute {
			t.Fatalf("ticket expires in %v", left)
		}
		return wsBase + tk.GetUrl()
	}
	boxIn := func() string { // the bytes the fake server got, in hex
		return strings.TrimSpace(mustExec(ctx, t, eng, ref, "cat /tmp/rfb.*.in 2>/dev/null | od -An -v -tx1 | tr -d ' \\n'"))
	}
	waitBoxIn := func(want []byte) {
		t.Helper()
		w := hex.EncodeToString(want)
		if err := testutil.Poll(ctx, 20*time.Second, func() error {
			if got := boxIn(); got != w {
				return fmt.Errorf("box got %s, want %s", got, w)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitViewers := func(n int32) {
		t.Helper()
		if err := testutil.Poll(ctx, 20*time.Second, func() error {
			b, err := e.box.GetBox(ownerCtx, &cbv1.GetBoxRequest{Box: string(id)})
			if err != nil || b.GetViewers() != n {
				return fmt.Errorf("viewers %d, %v; want %d", b.GetViewers(), err, n)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	// Refusals before the upgrade.
	tk, err := ticket(ownerCtx, false)
	if err != nil {
		t.Fatal(err)
	}
	forged := []byte(tk.GetTicket())
	forged[len(forged)/2] ^= 0x01
	expectHTTP(ctx, t, wsBase+strings.Replace(tk.GetUrl(), tk.GetTicket(), string(forged), 1), nil, http.StatusUnauthorized)
	expectHTTP(ctx, t, wsBase+"/v1/boxes/"+string(id)+"/desktop?mode=view", nil, http.StatusUnauthorized)
	expectHTTP(ctx, t, wsBase+strings.Replace(tk.GetUrl(), "mode=view", "mode=control", 1), nil, http.StatusForbidden)
	if _, err := ticket(ownerCtx, true); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "take over first") {
		t.Fatalf("control ticket without the lease: %v, want FailedPrecondition", err)
	}
	viewer, viewerToken := e.user(ctx, t, "viola")
	if _, err := d.Boxes.Share(ctx, owner.ID, id, viewer.ID, cocoonbox.RoleViewer, nil); err != nil {
		t.Fatal(err)
	}
	viewerCtx := e.as(ctx, viewerToken)
	if _, err := ticket(viewerCtx, true); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("viewer's control ticket: %v, want PermissionDenied", err)
	}
	// A ticket is checked again when used: a share revoked since it was issued opens nothing.
	revoked := mustTicket(viewerCtx, false)
	if err := d.Boxes.Unshare(ctx, owner.ID, id, viewer.ID); err != nil {
		t.Fatal(err)
	}
	expectHTTP(ctx, t, revoked, nil, http.StatusNotFound)
	// A refused ticket is not spent: shared again, it opens the desktop.
	if _, err := d.Boxes.Share(ctx, owner.ID, id, viewer.ID, cocoonbox.RoleViewer, nil); err != nil {
		t.Fatal(err)
	}
	again := dialDesktop(ctx, t, revoked, nil)
	handshake(ctx, t, again)
	_ = again.Close(websocket.StatusNormalClosure, "")

	// View: shared forced, input dropped, frames arrive.
	mustExec(ctx, t, eng, ref, "rm -f /tmp/rfb.*.in")
	viewURL := mustTicket(ownerCtx, false)
	view := dialDesktop(ctx, t, viewURL, nil)
	defer view.CloseNow()
	handshake(ctx, t, view)
	sendAll(ctx, t, view, pointerEvent, keyEvent, fbRequest)
	waitBoxIn(append([]byte{1}, fbRequest...))
	// Each connection is in the box's audit trail, with its mode (written beside the start).
	testutil.Eventually(t, testutil.WaitShort, "the view's box.desktop event", func() bool {
		evs, err := d.Store.EventsForBox(ctx, string(id), 100)
		if err != nil {
			t.Fatal(err)
		}
		views := 0
		for _, ev := range evs {
			if ev.Action == "box.desktop" && ev.Actor == owner.ID && strings.Contains(string(ev.Detail), `"view"`) {
				views++
			}
		}
		return views >= 1
	})
	// A ticket opens one connection: replayed (leaked from a log, say) it opens nothing.
	if resp := expectHTTP(ctx, t, viewURL, nil, http.StatusUnauthorized); !strings.Contains(resp, "already used") {
		t.Fatalf("a spent ticket: %s", resp)
	}

	// Control: after TakeOver, input passes; a second control connection is refused.
	if _, err := e.box.TakeOver(ownerCtx, &cbv1.TakeOverRequest{Box: string(id)}); err != nil {
		t.Fatal(err)
	}
	mustExec(ctx, t, eng, ref, "rm -f /tmp/rfb.*.in")
	ctl := dialDesktop(ctx, t, mustTicket(ownerCtx, true), nil)
	defer ctl.CloseNow()
	handshake(ctx, t, ctl)
	sendAll(ctx, t, ctl, pointerEvent, keyEvent, fbRequest)
	waitBoxIn(append(append(append([]byte{1}, pointerEvent...), keyEvent...), fbRequest...))
	waitViewers(2)
	bearer := http.Header{"Authorization": {"Bearer " + token}}
	controlPath := "/v1/boxes/" + string(id) + "/desktop?mode=control"
	resp := expectHTTP(ctx, t, wsBase+controlPath, bearer, http.StatusConflict)
	if !strings.Contains(resp, "already has a controller connection") {
		t.Fatalf("second control connection: %s", resp)
	}
	// The slot is the box's, not one API process's: another replica refuses a second control
	// connection too, and holds the slot once the first is closed.
	replicaWS := "ws" + strings.TrimPrefix(devstack.StartAPIReplica(t, d), "http")
	resp = expectHTTP(ctx, t, replicaWS+controlPath, bearer, http.StatusConflict)
	if !strings.Contains(resp, "already has a controller connection") {
		t.Fatalf("second control connection through another replica: %s", resp)
	}

	_ = view.Close(websocket.StatusNormalClosure, "")
	_ = ctl.Close(websocket.StatusNormalClosure, "")
	waitViewers(0)
	var other *websocket.Conn
	if err := testutil.Poll(ctx, testutil.WaitShort, func() error {
		ws, resp, err := websocket.Dial(ctx, replicaWS+controlPath, &websocket.DialOptions{Subprotocols: []string{"binary"}, HTTPHeader: bearer})
		if err != nil {
			if resp != nil && resp.StatusCode == http.StatusConflict {
				return err // the first connection's release is on its way
			}
			t.Fatalf("control connection through the replica: %v", err)
		}
		other = ws
		return nil
	}); err != nil {
		t.Fatalf("the replica never got the control slot: %v", err)
	}
	handshake(ctx, t, other)
	resp = expectHTTP(ctx, t, wsBase+controlPath, bearer, http.StatusConflict)
	if !strings.Contains(resp, "already has a controller connection") {
		t.Fatalf("a control connection while the replica holds the slot: %s", resp)
	}
	_ = other.Close(websocket.StatusNormalClosure, "")
	waitViewers(0)

	// A native client with a bearer token; a stream that is not RFB is closed with 1008 and a
	// reason, and the box still answers.
	bad := dialDesktop(ctx, t, wsBase+"/v1/boxes/"+string(id)+"/desktop?mode=view", bearer)
	defer bad.CloseNow()
	if err := bad.Write(ctx, websocket.MessageBinary, []byte("RFB 009.999\n")); err != nil {
		t.Fatal(err)
	}
	var ce websocket.CloseError
	for {
		_, _, err := bad.Read(ctx)
		if err == nil {
			continue // the server's version, sent before it saw ours
		}
		if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "protocol version") {
			t.Fatalf("after a bad version: %v, want close 1008 naming the version", err)
		}
		break
	}
	res, err := d.Boxes.Exec(ctx, owner.ID, id, boxsvc.ExecRequest{Argv: []string{"echo", "still here"}})
	if err != nil || res.ExitCode != 0 || res.Stdout != "still here\n" {
		t.Fatalf("exec after the broken stream: %+v, %v", res, err)
	}
	waitViewers(0)

	// A hibernated box is woken by opening its desktop, not refused.
	if v, err := d.Boxes.Hibernate(ctx, owner.ID, id); err != nil || v.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("hibernate: %+v, %v", v.State, err)
	}
	woken := dialDesktop(ctx, t, mustTicket(ownerCtx, false), nil)
	defer woken.CloseNow()
	handshake(ctx, t, woken)
	_ = woken.Close(websocket.StatusNormalClosure, "")
}

// dialDesktop opens the desktop WebSocket at url.
func dialDesktop(ctx context.Context, t *testing.T, url string, h http.Header) *websocket.Conn {
	t.Helper()
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"binary"}, HTTPHeader: h})
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Fatalf("dial desktop: %v (HTTP %d)", err, code)
	}
	if ws.Subprotocol() != "binary" {
		t.Fatalf("subprotocol %q, want binary", ws.Subprotocol())
	}
	return ws
}

// expectHTTP dials url and checks that the edge refuses it with status before the upgrade,
// returning the JSON error body.
func expectHTTP(ctx context.Context, t *testing.T, url string, h http.Header, want int) string {
	t.Helper()
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		_ = ws.CloseNow()
		t.Fatalf("dial %s: upgraded, want HTTP %d", url, want)
	}
	if resp == nil || resp.StatusCode != want {
		t.Fatalf("dial %s: %v, want HTTP %d", url, err, want)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `"error"`) {
		t.Fatalf("dial %s: body %q, want a JSON error", url, body)
	}
	return string(body)
}

// handshake runs the client's side of RFB 3.8 with security None, asking for an exclusive
// session (which the edge must turn into a shared one), and reads the ServerInit and a frame.
func handshake(ctx context.Context, t *testing.T, ws *websocket.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	r := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	read := func(n int) []byte {
		t.Helper()
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			t.Fatalf("read %d bytes of the handshake: %v", n, err)
		}
		return b
	}
	if v := read(12); string(v) != "RFB 003.008\n" {
		t.Fatalf("server version %q", v)
	}
	sendAll(ctx, t, ws, []byte("RFB 003.008\n"))
	if types := read(int(read(1)[0])); string(types) != "\x01" {
		t.Fatalf("security types %v", types)
	}
	sendAll(ctx, t, ws, []byte{1})
	if res := read(4); string(res) != "\x00\x00\x00\x00" {
		t.Fatalf("security result %v", res)
	}
	sendAll(ctx, t, ws, []byte{0}) // ClientInit: exclusive
	init := read(24)
	read(int(init[20])<<24 | int(init[21])<<16 | int(init[22])<<8 | int(init[23]))
	if frame := read(4); frame[0] != 0 {
		t.Fatalf("frame %v, want a FramebufferUpdate", frame)
	}
}

// sendAll sends each message as one binary WebSocket message.
func sendAll(ctx context.Context, t *testing.T, ws *websocket.Conn, msgs ...[]byte) {
	t.Helper()
	for _, m := range msgs {
		if err := ws.Write(ctx, websocket.MessageBinary, m); err != nil {
			t.Fatalf("send %v: %v", m, err)
		}
	}
}
