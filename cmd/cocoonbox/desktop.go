package main

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func desktopCommand() *cli.Command {
	return &cli.Command{
		Name:      "desktop",
		Usage:     "open a box's desktop in the browser, or tunnel it to a local port for a VNC viewer",
		ArgsUsage: "BOX",
		Description: "Without --listen, prints the web app's link to the box (open it in a browser signed in\n" +
			"with your token). With --listen 127.0.0.1:5900, every VNC viewer that connects there gets\n" +
			"the box's desktop through the API's desktop edge: watch-only, or with --control (which\n" +
			"takes the desktop's control lease for you) driving it.\n" +
			"Anyone who reaches the --listen address gets the desktop as you, so an address off\n" +
			"loopback needs --control=false (watch) or --control=true (drive) said explicitly.",
		Flags: apiFlags(
			&cli.StringFlag{Name: "listen", Usage: "tunnel the desktop to this local host:port (loopback recommended)"},
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
	if c.IsSet("listen") {
		warning, err := checkListen(c.String("listen"), c.IsSet("control"))
		if err != nil {
			return err
		}
		if warning != "" {
			fmt.Fprintln(c.App.ErrWriter, warning)
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
	if c.Bool("control") {
		if b, err = boxes.TakeOver(c.Context, &cbv1.TakeOverRequest{Box: b.GetId()}); err != nil {
			return apiError(err)
		}
	}
	if !c.IsSet("listen") {
		link := strings.TrimSuffix(u.String(), "/") + "/#/box/" + b.GetId()
		return s.out.result(&cbv1.DesktopTicketResponse{Url: link}, func(w io.Writer) error {
			_, err := fmt.Fprintln(w, link)
			return err
		})
	}
	ln, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	mode := "view"
	if c.Bool("control") {
		mode = "control"
	}
	edge := *u
	edge.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
	edge.Path = "/v1/boxes/" + b.GetId() + "/desktop"
	edge.RawQuery = url.Values{"mode": {mode}}.Encode()
	s.out.note("tunnelling %s's desktop (%s) to %s; point a VNC viewer there, Ctrl-C to stop", b.GetName(), mode, ln.Addr())
	handle := func(conn net.Conn) error { return tunnel(c.Context, conn, edge.String(), token) }
	return serveTunnels(c.Context, ln, handle, func(err error) { s.out.note("desktop connection: %v", err) })
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
