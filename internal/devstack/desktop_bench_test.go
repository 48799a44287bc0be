package devstack_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
	"github.com/loomhand/cocoonbox/workflows"
)

// Desktop benchmarks: from nothing to the first full frame of a desktop box's screen (1280x800,
// Raw, so every pixel crosses), through the desktop edge (ticket, WebSocket, rfb.Filter, ports
// relay), beside the same RFB client over the engine's ports relay alone. The ratio is what the
// edge adds. The desktop environment and the RFB client here serve the desktop tests as well.

// BenchmarkDesktop: the first full frame of one desktop box through the edge, running and
// hibernated, and the raw client's on the same box, in turn (interleaved). Each sample starts on
// a settled box, as a person opening a desktop finds it: the connection before it closed, its
// end reported to the box's workflow (waitViewers), the seal a hibernate started done (a
// snapshot of the box's disk to S3, which otherwise ran under the sample after each hibernated
// one), and a pause for the relay to wind down.
func BenchmarkDesktop(b *testing.B) {
	e := newDesktopBench(b)
	ref, err := e.sandbox()
	if err != nil {
		b.Fatal(err)
	}
	settle := func(b *testing.B) {
		e.waitViewers(b, 0)
		e.waitSealed(b)
		time.Sleep(boxBenchPause)
	}
	// The edge: a view ticket from the API, the WebSocket, the RFB handshake and the first
	// full frame.
	edgeFrame := func(b *testing.B) time.Duration {
		return since(b, func() error {
			c, err := e.open(e.ctx, false)
			if err != nil {
				return err
			}
			defer func() { _ = c.Close() }()
			_, err = c.frame()
			return err
		})
	}
	interleaved(b, 30,
		timed{"FirstFrame", func(b *testing.B) time.Duration {
			settle(b)
			return edgeFrame(b)
		}},
		// The same RFB client over the engine's ports relay to the box's port 5900, with the
		// sandbox client directly: no ticket, WebSocket or filter.
		timed{"RawFirstFrame", func(b *testing.B) time.Duration {
			settle(b)
			return since(b, func() error {
				conn, err := e.eng.DialPort(e.ctx, ref, 5900)
				if err != nil {
					return fmt.Errorf("dial port 5900: %w", err)
				}
				defer func() { _ = conn.Close() }()
				c, err := rfbHandshake(conn)
				if err == nil {
					_, err = c.frame()
				}
				return err
			})
		}},
		// FirstFrameHibernated: the edge on the box hibernated, so the time includes the wake
		// the edge asks for; the hibernate is untimed, and so is the seal it starts, which a
		// box that went to sleep when idle has finished long before anyone opens it.
		timed{"FirstFrameHibernated", func(b *testing.B) time.Duration {
			settle(b)
			if v, err := e.d.Boxes.Hibernate(e.ctx, e.owner.ID, e.id); err != nil || v.State != cocoonbox.BoxStateHibernated {
				b.Fatalf("hibernate: %+v, %v", v.State, err)
			}
			e.waitSealed(b)
			time.Sleep(boxBenchPause)
			return edgeFrame(b)
		}},
	)
}

// newDesktopBench starts a desktop dev stack with a running desktop box under a short data dir
// (runsc socket paths must fit 108 bytes).
func newDesktopBench(b *testing.B) *desktopEnv {
	b.Helper()
	dir := shortTemp(b)
	cfg := benchConfig(b, filepath.Join(dir, "h"))
	cfg.Template = "desktop"
	return newDesktopEnv(b, cfg, boxBenchRun)
}

// desktopEnv is a dev stack that claims desktop boxes, with one running desktop box (medium:
// XFCE wants more than a small box's memory), its owner's token and an API client.
type desktopEnv struct {
	d      *devstack.Dev
	ctx    context.Context // the whole test's
	owner  store.User
	token  string // the owner's bearer token
	eng    *sandbox.HTTP
	api    cbv1.BoxServiceClient
	wsBase string // the API's origin as ws://
	id     cocoonbox.BoxID
	ref    sandbox.SandboxRef // the box's sandbox, as last looked up
}

// newDesktopEnv starts the stack, creates the box and waits until its Xvnc answers through the
// edge and its window manager runs.
func newDesktopEnv(tb testing.TB, cfg config.Dev, timeout time.Duration) *desktopEnv {
	tb.Helper()
	return newDesktopEnvWith(tb, cfg, timeout, nil)
}

// newDesktopEnvWith is newDesktopEnv with started called on the stack before the box is created
// (to start a worker of a stack without its own).
func newDesktopEnvWith(tb testing.TB, cfg config.Dev, timeout time.Duration, started func(*devstack.Dev)) *desktopEnv {
	tb.Helper()
	start, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sc, log := newStackScan(tb, cfg.Home) // as startDev: scanned for leaked secrets before it closes
	d, err := devstack.Start(start, cfg, log)
	if err != nil {
		tb.Fatalf("start dev stack: %v", err)
	}
	tb.Cleanup(func() { _ = sc.close(tb, d) })
	if started != nil {
		started(d)
	}
	ctx, cancelRun := context.WithTimeout(context.Background(), timeout)
	tb.Cleanup(cancelRun)
	owner, err := d.Store.UserByName(ctx, "admin")
	if err != nil {
		tb.Fatal(err)
	}
	cli, err := config.LoadCLI(d.Bootstrap().CLIConfig, config.MapEnv(nil))
	if err != nil {
		tb.Fatal(err)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(d.URLs().API, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	url, root := d.Sandbox()
	e := &desktopEnv{
		d: d, ctx: ctx, owner: owner, token: cli.Token,
		eng:    sandbox.NewHTTP(url, root, &http.Client{Timeout: time.Minute}),
		api:    cbv1.NewBoxServiceClient(conn),
		wsBase: "ws" + strings.TrimPrefix(d.URLs().API, "http"),
		id:     cocoonbox.NewBoxID(),
	}
	v, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{ID: e.id, Name: "desk", Size: cocoonbox.SizeMedium})
	if err != nil || v.State != cocoonbox.BoxStateRunning {
		tb.Fatalf("create desktop box: %+v, %v", v.State, err)
	}
	began := time.Now()
	if err := testutil.Poll(ctx, time.Minute, func() error {
		c, err := e.open(ctx, false)
		if err != nil {
			return err
		}
		_ = c.Close()
		return nil
	}); err != nil {
		tb.Fatalf("the box's Xvnc through the edge: %v", err)
	}
	e.waitViewers(tb, 0) // that probe's connections are gone before anything counts viewers
	if err := testutil.Poll(ctx, time.Minute, func() error { _, err := e.run("pgrep -x xfwm4"); return err }); err != nil {
		tb.Fatalf("the box's XFCE session: %v", err)
	}
	tb.Logf("desktop box %s: Xvnc and xfwm4 up %v after create", e.id, time.Since(began).Round(time.Millisecond))
	return e
}

// open opens the box's desktop through the edge with a fresh ticket and runs the RFB handshake.
func (e *desktopEnv) open(ctx context.Context, control bool) (*rfbConn, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+e.token)
	tk, err := e.api.DesktopTicket(ctx, &cbv1.DesktopTicketRequest{Box: string(e.id), Control: control})
	if err != nil {
		return nil, fmt.Errorf("desktop ticket: %w", err)
	}
	ws, resp, err := websocket.Dial(ctx, e.wsBase+tk.GetUrl(), &websocket.DialOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		return nil, fmt.Errorf("dial desktop: %w (HTTP %d)", err, code)
	}
	ws.SetReadLimit(1 << 20)
	nc := websocket.NetConn(e.ctx, ws, websocket.MessageBinary)
	c, err := rfbHandshake(nc)
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	return c, nil
}

// sandbox is the box's current sandbox, read with the engine's root token.
func (e *desktopEnv) sandbox() (sandbox.SandboxRef, error) {
	v, err := e.d.Boxes.Get(e.ctx, e.owner.ID, e.id)
	if err != nil {
		return sandbox.SandboxRef{}, err
	}
	if v.SandboxID != e.ref.ID {
		row, err := e.eng.Get(e.ctx, v.SandboxID)
		if err != nil {
			return sandbox.SandboxRef{}, err
		}
		e.ref = sandbox.SandboxRef{ID: v.SandboxID, Token: row.Token}
	}
	return e.ref, nil
}

// run runs a shell script in the box as root and returns its stdout.
func (e *desktopEnv) run(script string) (string, error) {
	ref, err := e.sandbox()
	if err != nil {
		return "", err
	}
	res, err := e.eng.Exec(e.ctx, ref, sandbox.ExecRequest{Argv: []string{"sh", "-c", script}, TimeoutSeconds: 60})
	if err != nil {
		return "", fmt.Errorf("exec %q: %w", script, err)
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("exec %q: exit %d: %s", script, res.ExitCode, res.Stderr)
	}
	return res.Stdout, nil
}

func (e *desktopEnv) mustRun(tb testing.TB, script string) string {
	tb.Helper()
	out, err := e.run(script)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// waitViewers waits until the box reports n open desktop connections.
func (e *desktopEnv) waitViewers(tb testing.TB, n int) {
	tb.Helper()
	if err := testutil.Poll(e.ctx, 20*time.Second, func() error {
		v, err := e.d.Boxes.Get(e.ctx, e.owner.ID, e.id)
		if err != nil || v.Viewers != n {
			return fmt.Errorf("viewers %d, %v; want %d", v.Viewers, err, n)
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
}

// waitSealed waits until no seal of the box runs.
func (e *desktopEnv) waitSealed(tb testing.TB) {
	tb.Helper()
	if err := testutil.Poll(e.ctx, testutil.WaitLong, func() error {
		v, err := e.d.Boxes.Get(e.ctx, e.owner.ID, e.id)
		if err != nil || v.Seal == workflows.SealSealing {
			return fmt.Errorf("seal %q, %v", v.Seal, err)
		}
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
}

// rfbTimeout bounds each step of an RFB exchange.
const rfbTimeout = 30 * time.Second

// rfbConn is the client side of an RFB 3.8 session (security None or VNC Authentication,
// shared), as much of it as the desktop tests need: it asks for Raw only, so every rectangle's
// length follows from its header.
type rfbConn struct {
	conn          net.Conn
	r             *bufio.Reader
	width, height int
	bytesPerPixel int
}

// rfbHandshake runs the client's handshake on conn up to the ServerInit, with security None, and
// sends SetEncodings (Raw).
func rfbHandshake(conn net.Conn) (*rfbConn, error) { return rfbHandshakeAuth(conn, "") }

// rfbHandshakeAuth is rfbHandshake with VNC Authentication when password is not empty; a failed
// SecurityResult is an error with the server's reason.
func rfbHandshakeAuth(conn net.Conn, password string) (*rfbConn, error) {
	_ = conn.SetDeadline(time.Now().Add(rfbTimeout))
	c := &rfbConn{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
	if v, err := c.read(12); err != nil || string(v) != "RFB 003.008\n" {
		return nil, fmt.Errorf("server version %q: %v", v, err)
	}
	if err := c.write([]byte("RFB 003.008\n")); err != nil {
		return nil, err
	}
	n, err := c.r.ReadByte()
	if err != nil {
		return nil, fmt.Errorf("security types: %w", err)
	}
	choice := byte(1)
	if password != "" {
		choice = 2
	}
	if types, err := c.read(int(n)); err != nil || !bytes.Contains(types, []byte{choice}) {
		return nil, fmt.Errorf("security types %v, want %d: %v", types, choice, err)
	}
	if err := c.write([]byte{choice}); err != nil {
		return nil, err
	}
	if password != "" {
		challenge, err := c.read(16)
		if err != nil {
			return nil, fmt.Errorf("vnc challenge: %w", err)
		}
		if err := c.write(vncDES(password, challenge)); err != nil {
			return nil, err
		}
	}
	res, err := c.read(4)
	if err != nil {
		return nil, fmt.Errorf("security result: %w", err)
	}
	if code := binary.BigEndian.Uint32(res); code != 0 {
		n, err := c.read(4)
		if err != nil {
			return nil, fmt.Errorf("security result %d: %w", code, err)
		}
		reason, _ := c.read(int(binary.BigEndian.Uint32(n)))
		return nil, fmt.Errorf("security result %d: %s", code, reason)
	}
	if err := c.write([]byte{1}); err != nil { // ClientInit: shared
		return nil, err
	}
	init, err := c.read(24)
	if err != nil {
		return nil, fmt.Errorf("server init: %w", err)
	}
	if _, err := c.read(int(binary.BigEndian.Uint32(init[20:]))); err != nil {
		return nil, fmt.Errorf("desktop name: %w", err)
	}
	c.width, c.height = int(binary.BigEndian.Uint16(init[0:])), int(binary.BigEndian.Uint16(init[2:]))
	c.bytesPerPixel = int(init[4]) / 8
	if err := c.write([]byte{2, 0, 0, 1, 0, 0, 0, 0}); err != nil { // SetEncodings: Raw
		return nil, err
	}
	return c, nil
}

// frame asks for the whole screen, not incrementally, and reads FramebufferUpdates until their
// rectangles cover it, returning how many rectangles came.
func (c *rfbConn) frame() (int, error) {
	_ = c.conn.SetDeadline(time.Now().Add(rfbTimeout))
	w, h := c.width, c.height
	if err := c.write([]byte{3, 0, 0, 0, 0, 0, byte(w >> 8), byte(w), byte(h >> 8), byte(h)}); err != nil {
		return 0, err
	}
	rects, area := 0, 0
	for area < w*h {
		n, a, err := c.update()
		if err != nil {
			return rects, err
		}
		rects, area = rects+n, area+a
	}
	return rects, nil
}

// update reads server messages up to and including the next FramebufferUpdate, skipping bells,
// colour map entries and clipboard text, and returns its rectangles and their area.
func (c *rfbConn) update() (rects, area int, err error) {
	for {
		typ, err := c.r.ReadByte()
		if err != nil {
			return 0, 0, fmt.Errorf("server message: %w", err)
		}
		switch typ {
		case 0: // FramebufferUpdate
			hdr, err := c.read(3)
			if err != nil {
				return 0, 0, err
			}
			n := int(binary.BigEndian.Uint16(hdr[1:]))
			for range n {
				r, err := c.read(12)
				if err != nil {
					return 0, 0, err
				}
				rw, rh := int(binary.BigEndian.Uint16(r[4:])), int(binary.BigEndian.Uint16(r[6:]))
				if enc := int32(binary.BigEndian.Uint32(r[8:])); enc != 0 {
					return 0, 0, fmt.Errorf("rectangle encoding %d, asked for Raw only", enc)
				}
				if _, err := c.r.Discard(rw * rh * c.bytesPerPixel); err != nil {
					return 0, 0, fmt.Errorf("rectangle pixels: %w", err)
				}
				area += rw * rh
			}
			return n, area, nil
		case 1: // SetColourMapEntries
			hdr, err := c.read(5)
			if err == nil {
				_, err = c.r.Discard(6 * int(binary.BigEndian.Uint16(hdr[3:])))
			}
			if err != nil {
				return 0, 0, err
			}
		case 2: // Bell
		case 3: // ServerCutText
			hdr, err := c.read(7)
			if err == nil {
				_, err = c.r.Discard(int(binary.BigEndian.Uint32(hdr[3:])))
			}
			if err != nil {
				return 0, 0, err
			}
		default:
			return 0, 0, fmt.Errorf("server message type %d", typ)
		}
	}
}

func (c *rfbConn) read(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return b, fmt.Errorf("read %d bytes: %w", n, err)
	}
	return b, nil
}

func (c *rfbConn) write(b []byte) error {
	if _, err := c.conn.Write(b); err != nil {
		return fmt.Errorf("send %v: %w", b[0], err)
	}
	return nil
}

// Close closes the connection.
func (c *rfbConn) Close() error { return c.conn.Close() }
