package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/loomhand/cocoonbox/internal/rfb"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// desktopPasswordTries is how many wrong VNC passwords one desktop tunnel takes before it
// refuses every viewer: room for typing mistakes, none for guessing.
const desktopPasswordTries = 5

func desktopCommand() *cli.Command {
	return &cli.Command{
		Name:      "desktop",
		Usage:     "open a box's desktop in the browser, or tunnel it to a local port for a VNC viewer",
		ArgsUsage: "BOX",
		Description: "Without --listen or --open, prints the web app's link to the box (open it in a browser\n" +
			"signed in with your token). With --listen 127.0.0.1:5900, every VNC viewer that connects\n" +
			"there gets the box's desktop through the API's desktop edge: watch-only, or with --control\n" +
			"(which takes the desktop's control lease for you) driving it. The tunnel hands the lease\n" +
			"back when it ends (Ctrl-C, SIGTERM), unless you held it before it started; a tunnel killed\n" +
			"outright leaves that to the box, which releases a lease with no control connection after its\n" +
			"lease idle (2m by default), so the agent's runs do not wait for it. --open also hands\n" +
			"vnc://ADDRESS to the system's viewer (open on macOS, xdg-open elsewhere), on a free\n" +
			"loopback port unless --listen says where.\n" +
			"Viewers must give the one-time VNC password printed when the tunnel opens; it is valid\n" +
			"while the command runs, and after " + strconv.Itoa(desktopPasswordTries) + " wrong ones no viewer gets in. It only gates the\n" +
			"local port (VNC's DES authentication is weak), so keep the tunnel on loopback: anyone who\n" +
			"reaches the --listen address and has the password gets the desktop as you, and an address\n" +
			"off loopback needs --control=false (watch) or --control=true (drive) said explicitly.",
		Flags: apiFlags(
			&cli.StringFlag{Name: "listen", Usage: "tunnel the desktop to this local host:port (loopback recommended)"},
			&cli.BoolFlag{Name: "open", Usage: "open the tunnel in the system's VNC viewer (on 127.0.0.1 and a free port unless --listen)"},
			&cli.BoolFlag{Name: "control", Usage: "drive the desktop (takes the control lease) instead of watching"},
		),
		Action: runDesktop,
	}
}

func runDesktop(c *cli.Context) error {
	args, err := positional(c, "BOX", 1, 1)
	if err != nil {
		return err
	}
	listen := c.String("listen")
	if c.IsSet("listen") {
		warning, err := checkListen(listen, c.IsSet("control"))
		if err != nil {
			return err
		}
		if warning != "" {
			fmt.Fprintln(c.App.ErrWriter, warning)
		}
	}
	var opener string
	if c.Bool("open") {
		if opener, err = viewerOpener(); err != nil {
			return err
		}
		if listen == "" {
			listen = "127.0.0.1:0"
		}
	}
	u, token, err := target(c)
	if err != nil {
		return err
	}
	s, boxes, err := boxClient(c)
	if err != nil {
		return err
	}
	defer s.Close()
	b, err := boxes.GetBox(c.Context, &cbv1.GetBoxRequest{Box: args[0]})
	if err != nil {
		return apiError(err)
	}
	took := false
	if c.Bool("control") {
		held := b.GetController()
		if b, err = boxes.TakeOver(c.Context, &cbv1.TakeOverRequest{Box: b.GetId()}); err != nil {
			return apiError(err)
		}
		took = held != b.GetController() // a lease held before is kept
	}
	// Without a tunnel the lease is the browser's to use: the box releases it if none connects.
	if listen == "" {
		link := strings.TrimSuffix(u.String(), "/") + "/#/box/" + b.GetId()
		return s.out.result(&cbv1.DesktopTicketResponse{Url: link}, func(w io.Writer) error {
			_, err := fmt.Fprintln(w, link)
			return err
		})
	}
	mode := "view"
	if c.Bool("control") {
		mode = "control"
	}
	edge := *u
	edge.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
	edge.Path = "/v1/boxes/" + b.GetId() + "/desktop"
	edge.RawQuery = url.Values{"mode": {mode}}.Encode()
	if took {
		defer handBackDesktop(s.out, boxes, b.GetId())
	}
	return tunnelDesktop(c.Context, s.out, listen, edge.String(), token, opener,
		fmt.Sprintf("tunnelling %s's desktop (%s)", b.GetName(), mode))
}

// handBackTimeout bounds the hand-back as the tunnel ends, so a second Ctrl-C is not needed
// when the API is gone (the box releases the lease by itself then).
const handBackTimeout = 10 * time.Second

// handBackDesktop gives back the control lease a tunnel took, so the agent's runs waiting for the
// desktop go on. The command's context is cancelled by then (the tunnel ended on it), hence a
// fresh one.
func handBackDesktop(out *printer, boxes cbv1.BoxServiceClient, box string) {
	ctx, cancel := context.WithTimeout(context.Background(), handBackTimeout)
	defer cancel()
	if _, err := boxes.HandBack(ctx, &cbv1.HandBackRequest{Box: box}); err != nil {
		out.note("hand the desktop back: %v; the box releases it after its lease idle", apiError(err))
		return
	}
	out.note("handed the desktop back")
}

// tunnelDesktop serves the desktop edge on listen to every local VNC viewer that knows a
// one-time password, until ctx ends, and opens the tunnel with opener unless it is empty.
func tunnelDesktop(ctx context.Context, out *printer, listen, edge, token, opener, what string) error {
	password := rand.Text()[:8] // 40 bits from base32's alphabet, which has no 0, 1, 8 or 9 to misread
	gate, err := rfb.NewGate(password, desktopPasswordTries)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	out.note("%s to %s; point a VNC viewer there, Ctrl-C to stop", what, ln.Addr())
	out.note("VNC password: %s (valid while this command runs)", password)
	if opener != "" {
		openViewer(out, opener, vncURL(ln.Addr()))
	}
	handle := func(conn net.Conn) error { return viewerTunnel(ctx, conn, gate, edge, token) }
	return serveTunnels(ctx, ln, handle, func(err error) {
		if errors.Is(err, rfb.ErrLocked) {
			err = fmt.Errorf("%w: no viewer gets in now; run cocoonbox desktop again for a new password", err)
		}
		out.note("desktop connection: %v", err)
	})
}

// viewerTunnel asks a local viewer for the gate's password before it reaches the edge, then
// answers the edge's own handshake (security None) itself, so that the viewer and the box
// speak to each other from ClientInit on. A failure reaching the edge is the viewer's
// refusal reason too.
func viewerTunnel(ctx context.Context, conn net.Conn, gate *rfb.Gate, edge, token string) error {
	defer conn.Close()
	viewer, err := gate.Authenticate(conn)
	if err != nil {
		return fmt.Errorf("viewer %s: %w", conn.RemoteAddr(), err)
	}
	nc, err := dialEdge(ctx, edge, token)
	if err == nil {
		defer nc.Close()
		if err = rfb.ConnectNone(nc); err != nil {
			err = cmp.Or(edgeClosed(err), err)
		}
	}
	if err != nil {
		_ = viewer.Refuse(err.Error())
		return err
	}
	if err := viewer.Admit(); err != nil {
		return err
	}
	return relay(conn, nc)
}

// viewerOpener is the program that hands a vnc:// URL to the system's viewer.
func viewerOpener() (string, error) {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("--open: %s is not on PATH to hand vnc:// to a viewer; use --listen and point a viewer there", name)
	}
	return path, nil
}

// openViewer runs opener on target without waiting for it, and notes its failure.
func openViewer(out *printer, opener, target string) {
	cmd := exec.Command(opener, target)
	cmd.Stdout, cmd.Stderr = out.errw, out.errw
	if err := cmd.Start(); err != nil {
		out.note("--open: %v", err)
		return
	}
	go func() {
		if err := cmd.Wait(); err != nil {
			out.note("--open: %s %s: %v", filepath.Base(opener), target, err)
		}
	}()
}

// vncURL is the vnc:// URL of a listener: on loopback when it listens on every interface.
func vncURL(addr net.Addr) string {
	host, port, _ := net.SplitHostPort(addr.String())
	switch ip := net.ParseIP(host); {
	case ip == nil:
	case ip.To4() != nil && ip.IsUnspecified():
		host = "127.0.0.1"
	case ip.IsUnspecified():
		host = "::1"
	}
	return "vnc://" + net.JoinHostPort(host, port)
}

// checkListen applies the rule for --listen: a loopback address (127.0.0.0/8, ::1, localhost)
// needs nothing more; any other address, the empty host (every interface) included, hands the
// desktop to whoever reaches it as the caller, so it needs --control set explicitly, either way,
// and then returns a warning saying so.
func checkListen(addr string, controlSet bool) (warning string, err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", usageError("--listen: want host:port, got %q", addr)
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return "", nil
	}
	if !controlSet {
		return "", usageError("--listen %s is off loopback: anyone who reaches it gets the desktop as you; "+
			"say --control=false to let them watch or --control=true to let them drive, or listen on 127.0.0.1", addr)
	}
	return fmt.Sprintf("warning: --listen %s is off loopback: anyone who reaches it gets the desktop as you", addr), nil
}
