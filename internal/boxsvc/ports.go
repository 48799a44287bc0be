package boxsvc

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/workflows"
)

// CheckPort names what is wrong with port as a box port a user may open: 1 to 65535, and none
// of the agent's own ports, which take the box's agent credential (only the control plane holds
// it) and would let a caller act as the control plane.
func CheckPort(port int) error {
	switch port {
	case wire.AgentPort, wire.LinkPort, wire.MCPPort:
		return cocoonbox.Invalid("port", fmt.Sprintf("%d is the box agent's own port, not one users open", port))
	}
	if port < 1 || port > 65535 {
		return cocoonbox.Invalid("port", fmt.Sprintf("must be 1 to 65535, got %d", port))
	}
	return nil
}

// DialPort opens a byte pipe to TCP port on the box's loopback for caller (viewer and above),
// waking the box through its workflow when it sleeps and caller is a driver (a viewer is refused
// a sleeping box, which stays asleep, as with the desktop). Nothing listening there is
// unavailable, naming the port. The caller owns the connection.
func (s *Service) DialPort(ctx context.Context, caller string, id cocoonbox.BoxID, port int) (Conn, error) {
	if err := CheckPort(port); err != nil {
		return nil, err
	}
	ref, err := s.reach(ctx, caller, id, cocoonbox.RoleViewer, nil)
	if err != nil {
		return nil, err
	}
	conn, err := s.Link.Sandbox.DialPort(ctx, ref, port)
	if err != nil {
		return nil, boxlink.DialError(err, fmt.Sprintf("port %d", port))
	}
	s.audit(ctx, caller, id, "port", map[string]any{"port": port})
	s.touch(ctx, id)
	return &awakeConn{Conn: conn, done: s.keepAwake(context.WithoutCancel(ctx), id)}, nil
}

// awakeConn is a connection to a box port that keeps the box awake until it is closed: a dev
// server's WebSocket open in a browser is work, as an exec is, and hibernating under it would
// cut it. Like an exec's, it touches rather than pins, so a process that dies with connections
// open leaves nothing holding the box.
type awakeConn struct {
	Conn
	once sync.Once
	done func()
}

func (c *awakeConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

// maxListed bounds ListPorts: a box may listen on every port, and the answer is the box's text.
const maxListed = 256

// ListPorts returns the TCP ports something in the box listens on, sorted, without the agent's
// own (viewer and above; a sleeping box is woken for a driver, refused to a viewer). It reads the
// box's /proc/net/tcp and tcp6, which are the box's text: a line that does not parse is skipped,
// and at most maxListed ports are returned.
func (s *Service) ListPorts(ctx context.Context, caller string, id cocoonbox.BoxID) ([]int, error) {
	ref, err := s.reach(ctx, caller, id, cocoonbox.RoleViewer, nil)
	if err != nil {
		return nil, err
	}
	res, err := s.Link.Sandbox.Exec(ctx, ref, sandbox.ExecRequest{
		Argv: []string{"cat", "/proc/net/tcp", "/proc/net/tcp6"}, TimeoutSeconds: 10,
	})
	if err != nil {
		return nil, execError(err, 10)
	}
	return listening(res.Stdout), nil
}

// listening reads the LISTEN sockets (state 0A) of /proc/net/tcp-format text: their local
// ports, deduplicated and sorted, the agent's ports left out.
func listening(text string) []int {
	seen := map[int]bool{}
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil || p == 0 || CheckPort(int(p)) != nil {
			continue
		}
		seen[int(p)] = true
	}
	ports := slices.Sorted(maps.Keys(seen))
	if len(ports) > maxListed {
		ports = ports[:maxListed]
	}
	return ports
}

// SetPortPublic makes a port of the box public or private again (the owner only: a public port
// answers anyone without a token). Making a port public needs nothing to listen on it yet.
func (s *Service) SetPortPublic(ctx context.Context, caller string, id cocoonbox.BoxID, port int, public bool) error {
	if err := CheckPort(port); err != nil {
		return err
	}
	a, err := s.authorize(ctx, caller, id, cocoonbox.RoleAdmin)
	if err != nil {
		return err
	}
	if a.role != cocoonbox.RoleOwner {
		return cocoonbox.Errorf(cocoonbox.EForbidden, "box %s: only its owner makes a port public", id)
	}
	if err := s.Store.SetPortPublic(ctx, string(id), port, public, caller); err != nil {
		return err
	}
	s.audit(ctx, caller, id, "port_public", map[string]any{"port": port, "public": public})
	return nil
}

// PublicPorts lists the box's public ports (viewer and above).
func (s *Service) PublicPorts(ctx context.Context, caller string, id cocoonbox.BoxID) ([]int, error) {
	if _, err := s.authorize(ctx, caller, id, cocoonbox.RoleViewer); err != nil {
		return nil, err
	}
	return s.Store.PublicPorts(ctx, string(id))
}

// errNotPublic answers an anonymous request for a port that is not public, exactly as for a box
// that does not exist: nobody learns from it which boxes exist or listen.
func errNotPublic(id cocoonbox.BoxID) error {
	return cocoonbox.Errorf(cocoonbox.EUnauthorized, "box %s: this port needs a token or a preview session; sign in through the web app", id)
}

// DialPublicPort opens a byte pipe to a public port of a running box for an anonymous caller.
// It never wakes a box: an anonymous request must cost no sandbox.
func (s *Service) DialPublicPort(ctx context.Context, id cocoonbox.BoxID, port int) (Conn, error) {
	if err := CheckPort(port); err != nil {
		return nil, err
	}
	if err := id.Validate(); err != nil {
		return nil, err
	}
	public, err := s.Store.PortPublic(ctx, string(id), port)
	if err != nil {
		return nil, err
	}
	if !public {
		return nil, errNotPublic(id)
	}
	if s.Link == nil {
		return nil, &cocoonbox.Error{Code: cocoonbox.EUnavailable, Message: "boxes cannot be reached from this server", Err: errUnavailable}
	}
	st, err := s.status(ctx, id)
	if err != nil {
		return nil, err
	}
	if !workflows.Up(st.State) {
		return nil, cocoonbox.Errorf(cocoonbox.EUnavailable, "box %s is not running; its owner can wake it", id)
	}
	ref, err := s.Link.Tokens.SandboxToken(ctx, string(id))
	if err != nil || ref.ID != st.SandboxID {
		return nil, cocoonbox.Errorf(cocoonbox.EUnavailable, "box %s is changing sandboxes; try again", id)
	}
	conn, err := s.Link.Sandbox.DialPort(ctx, ref, port)
	if err != nil {
		return nil, boxlink.DialError(err, fmt.Sprintf("port %d", port))
	}
	return conn, nil
}
