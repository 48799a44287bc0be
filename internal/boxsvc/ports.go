package boxsvc

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/sandbox"
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
	return conn, nil
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
