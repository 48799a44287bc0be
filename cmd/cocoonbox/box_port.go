package main

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func boxPortCommand() *cli.Command {
	return &cli.Command{
		Name:  "port",
		Usage: "open a port of a box on this machine: a local listener tunnelled to the box's loopback",
		Description: "Every connection to the local address is one TCP connection to PORT inside the box,\n" +
			"through the API's ports edge (viewer role or above; a driver's connection wakes a sleeping\n" +
			"box). The box's agent ports (7070-7072) are not opened. Ctrl-C stops listening.\n\n" +
			"With --public (the box's owner only), the port's preview answers anyone without a token\n" +
			"while the box runs (an anonymous request never wakes it); --private undoes that. Either\n" +
			"sets the flag and exits without tunnelling.",
		ArgsUsage: "BOX PORT",
		Flags: apiFlags(
			&cli.StringFlag{Name: "listen", Usage: "local address (default 127.0.0.1:PORT; loopback only)"},
			&cli.BoolFlag{Name: "public", Usage: "let anyone open the port's preview, without a token, and exit"},
			&cli.BoolFlag{Name: "private", Usage: "take --public back, and exit"},
		),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX PORT", 2, 2)
			if err != nil {
				return err
			}
			port, err := strconv.Atoi(args[1])
			if err != nil || port < 1 || port > 65535 {
				return usageError("box port: PORT must be a number from 1 to 65535, got %q", args[1])
			}
			if c.Bool("public") || c.Bool("private") {
				return setPortPublic(c, args[0], port)
			}
			listen := c.String("listen")
			if listen == "" {
				listen = net.JoinHostPort("127.0.0.1", args[1])
			}
			host, _, err := net.SplitHostPort(listen)
			if err != nil {
				return usageError("box port: --listen: want host:port, got %q", listen)
			}
			if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				return usageError("box port: --listen %s is off loopback: anyone who reaches it would reach the box as you; listen on 127.0.0.1", listen)
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
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen: %w (choose another with --listen)", err)
			}
			defer ln.Close()
			edge := *u
			edge.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
			edge.Path = fmt.Sprintf("/v1/boxes/%s/ports/%d", b.GetId(), port)
			s.out.note("tunnelling %s's port %d to %s; Ctrl-C to stop", b.GetName(), port, ln.Addr())
			handle := func(conn net.Conn) error { return tunnel(c.Context, conn, edge.String(), token) }
			return serveTunnels(c.Context, ln, handle, func(err error) { s.out.note("port %d connection: %v", port, err) })
		},
	}
}

func boxPortsCommand() *cli.Command {
	return &cli.Command{
		Name:      "ports",
		Usage:     "list the TCP ports something in a box listens on, and where to open each",
		ArgsUsage: "BOX",
		Flags:     apiFlags(),
		Action: func(c *cli.Context) error {
			args, err := positional(c, "BOX", 1, 1)
			if err != nil {
				return err
			}
			u, _, err := target(c)
			if err != nil {
				return err
			}
			s, boxes, err := boxClient(c)
			if err != nil {
				return err
			}
			defer s.Close()
			resp, err := boxes.ListPorts(c.Context, &cbv1.ListPortsRequest{Box: args[0]})
			if err != nil {
				return apiError(err)
			}
			base := strings.TrimSuffix(u.String(), "/")
			return listResult(s.out, resp.GetPorts(), func(w io.Writer) error { return writePorts(w, base, args[0], resp.GetPorts()) })
		},
	}
}

// writePorts is the table of box ports: the preview URL needs the bearer token, so the line
// also says how to open one with a browser or any client (box port).
func writePorts(w io.Writer, base, box string, ports []*cbv1.Port) error {
	if len(ports) == 0 {
		_, err := fmt.Fprintln(w, "Nothing in the box listens on a TCP port.")
		return err
	}
	tw := table(w)
	row(tw, "PORT", "PUBLIC", "PREVIEW (bearer token, or anyone when public)", "OPEN HERE")
	for _, p := range ports {
		public := "-"
		if p.GetPublic() {
			public = "yes"
		}
		row(tw, strconv.Itoa(int(p.GetPort())), public, base+p.GetPreviewPath(), fmt.Sprintf("cocoonbox box port %s %d", box, p.GetPort()))
	}
	return tw.Flush()
}

// setPortPublic carries out box port --public or --private.
func setPortPublic(c *cli.Context, box string, port int) error {
	if c.Bool("public") && c.Bool("private") {
		return usageError("box port: --public and --private contradict each other")
	}
	u, _, err := target(c)
	if err != nil {
		return err
	}
	s, boxes, err := boxClient(c)
	if err != nil {
		return err
	}
	defer s.Close()
	p, err := boxes.SetPortPublic(c.Context, &cbv1.SetPortPublicRequest{Box: box, Port: int32(port), Public: c.Bool("public")})
	if err != nil {
		return apiError(err)
	}
	if s.out.json {
		return writeJSON(s.out.w, p)
	}
	if !p.GetPublic() {
		s.out.note("port %d of %s is private: its preview needs a token again", port, box)
		return nil
	}
	where := strings.TrimSuffix(u.String(), "/") + p.GetPreviewPath()
	if h := p.GetPreviewHost(); h != "" {
		where = u.Scheme + "://" + h + "/"
	}
	s.out.note("port %d of %s is public while the box runs: %s", port, box, where)
	return nil
}
