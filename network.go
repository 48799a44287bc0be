package cocoonbox

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Network policies a box can have.
const (
	// NetworkNone is no NIC: the box reaches nothing and is reached only through the API.
	NetworkNone = "none"
	// NetworkInternet reaches the internet: everything but the host, other boxes, link-local and
	// cloud metadata addresses, and private ranges.
	NetworkInternet = "internet"
	// NetworkAllow reaches only the destinations Network.Allow lists.
	NetworkAllow = "allow"
)

// NetworkPolicies are the values Network.Policy takes.
var NetworkPolicies = []string{NetworkNone, NetworkInternet, NetworkAllow}

// MaxNetworkAllow bounds an allow-list.
const MaxNetworkAllow = 64

// Network is a box's egress policy, enforced outside the box (the engine's router), so nothing in
// the box can change it.
type Network struct {
	Policy string   // NetworkNone, NetworkInternet or NetworkAllow
	Allow  []string // NetworkAllow's destinations: IPv4 "CIDR" or "CIDR:port"
}

// Validate names the field at fault: network or network_allow.
func (n Network) Validate() error {
	switch n.Policy {
	case NetworkNone, NetworkInternet:
		if len(n.Allow) > 0 {
			return Invalid("network_allow", "only the "+NetworkAllow+" policy takes a list of destinations")
		}
	case NetworkAllow:
		if len(n.Allow) == 0 {
			return Invalid("network_allow", "the "+NetworkAllow+" policy needs at least one destination")
		}
		if len(n.Allow) > MaxNetworkAllow {
			return Invalid("network_allow", fmt.Sprintf("%d destinations, more than the %d allowed", len(n.Allow), MaxNetworkAllow))
		}
		for _, a := range n.Allow {
			if err := validateDestination(a); err != nil {
				return err
			}
		}
	default:
		return Invalid("network", fmt.Sprintf("must be %s, got %s", strings.Join(NetworkPolicies, ", "), quote(n.Policy)))
	}
	return nil
}

// validateDestination checks one allow-list entry: an IPv4 address or CIDR, optionally :port.
func validateDestination(s string) error {
	addr := s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		if p, err := strconv.Atoi(s[i+1:]); err != nil || p < 1 || p > 65535 {
			return Invalid("network_allow", quote(s)+": the port must be 1 to 65535")
		}
		addr = s[:i]
	}
	var err error
	var a netip.Addr
	if strings.Contains(addr, "/") {
		var p netip.Prefix
		p, err = netip.ParsePrefix(addr)
		a = p.Addr()
	} else {
		a, err = netip.ParseAddr(addr)
	}
	if err != nil || !a.Is4() {
		return Invalid("network_allow", quote(s)+": want an IPv4 address or CIDR, optionally with :port (host names are not supported)")
	}
	return nil
}
