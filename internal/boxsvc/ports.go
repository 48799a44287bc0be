package boxsvc

import (
	"context"
	"fmt"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/boxlink"
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
