package runtime

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// Network is how a runtime gives boxes a NIC. A box with a NetSpec gets gVisor's netstack on a
// veth pair whose other end is in the router's network namespace (UplinkNetns, or the host's
// when empty), where the box's egress policy is enforced and its traffic is NATed out of Uplink:
// nothing of the policy is inside the box, so nothing in the box can change it.
type Network struct {
	// Uplink is the interface box traffic leaves through, in the router's namespace. Empty: the
	// runtime gives no box a NIC.
	Uplink string
	// UplinkNetns names (as `ip netns` does) the namespace that routes for the boxes and holds
	// Uplink. Empty: the host's own, which then forwards IPv4.
	UplinkNetns string
	// Pool is the addresses boxes get, a /30 each (router end first, box end second). Zero:
	// DefaultPool.
	Pool netip.Prefix
	// DNS are the resolvers a box's /etc/resolv.conf names; the policy lets the box reach them on
	// port 53 even when they are in a private range.
	DNS []netip.Addr
}

// DefaultPool is Network.Pool when none is given: room for 16384 boxes.
var DefaultPool = netip.MustParsePrefix("10.88.0.0/16")

// Enabled reports whether boxes can have a NIC.
func (n Network) Enabled() bool { return n.Uplink != "" }

func (n Network) pool() netip.Prefix {
	if n.Pool.IsValid() {
		return n.Pool.Masked()
	}
	return DefaultPool
}

// Egress policies a networked box can have (a box without a NIC has none).
const (
	// EgressInternet reaches everything but the host, other boxes, link-local and metadata
	// addresses, and private, shared, multicast and reserved ranges.
	EgressInternet = "internet"
	// EgressAllow reaches only what Allow lists (and the resolvers).
	EgressAllow = "allow"
)

// Egress is a networked box's egress policy.
type Egress struct {
	Policy string   // EgressInternet or EgressAllow
	Allow  []string // EgressAllow's destinations: "CIDR" or "CIDR:port" (TCP and UDP)
}

// Validate names the first thing wrong with e.
func (e Egress) Validate() error {
	switch e.Policy {
	case EgressInternet:
		if len(e.Allow) > 0 {
			return fmt.Errorf("egress allow: only the %q policy takes a list", EgressAllow)
		}
	case EgressAllow:
		if len(e.Allow) == 0 {
			return fmt.Errorf("egress allow: the %q policy needs at least one destination", EgressAllow)
		}
		if len(e.Allow) > maxAllow {
			return fmt.Errorf("egress allow: %d destinations, more than the %d allowed", len(e.Allow), maxAllow)
		}
		for _, a := range e.Allow {
			if _, _, err := parseAllow(a); err != nil {
				return fmt.Errorf("egress allow: %w", err)
			}
		}
	default:
		return fmt.Errorf("egress policy: unknown policy %q, want %q or %q", e.Policy, EgressInternet, EgressAllow)
	}
	return nil
}

// maxAllow bounds an allow-list: each entry is a rule every packet of the box may be matched on.
const maxAllow = 64

// parseAllow reads "CIDR", "IP", "CIDR:port" or "IP:port" (IPv4; port 0 means every port).
func parseAllow(s string) (netip.Prefix, int, error) {
	addr, port := s, 0
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		p, err := strconv.Atoi(s[i+1:])
		if err != nil || p < 1 || p > 65535 {
			return netip.Prefix{}, 0, fmt.Errorf("%q: the port must be 1 to 65535", s)
		}
		addr, port = s[:i], p
	}
	var pfx netip.Prefix
	var err error
	if strings.Contains(addr, "/") {
		pfx, err = netip.ParsePrefix(addr)
	} else {
		var a netip.Addr
		if a, err = netip.ParseAddr(addr); err == nil {
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil || !pfx.Addr().Is4() {
		return netip.Prefix{}, 0, fmt.Errorf("%q: want an IPv4 address or CIDR, optionally with :port (host names are not supported)", s)
	}
	return pfx.Masked(), port, nil
}

// NetSpec is a box's NIC. A Spec without one has loopback only.
type NetSpec struct {
	// Addr is the box's address with its /30; the runtime allocates it at Start when zero, and
	// the box keeps it across hibernate and wake.
	Addr   netip.Prefix
	Egress Egress
}

// gateway is the router's end of the box's /30: the address before the box's.
func (n NetSpec) gateway() netip.Addr { return n.Addr.Addr().Prev() }

// slot returns the /30 number i of pool: router end .1, box end .2 of it.
func slot(pool netip.Prefix, i int) (netip.Prefix, bool) {
	if i < 0 || pool.Bits() > 30 || i >= 1<<(30-pool.Bits()) {
		return netip.Prefix{}, false
	}
	b := pool.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(i)*4 + 2
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), 30), true
}

// allocAddr gives box id the first /30 of the pool no other box of the index holds; a box keeps
// its address for life (it is in its spec), so a slot is free again only once its box is gone.
func (g *gvisor) allocAddr(id string) (netip.Prefix, error) {
	g.mu.Lock() // one allocation at a time: two boxes never get one slot
	defer g.mu.Unlock()
	used := map[netip.Prefix]bool{}
	entries, err := os.ReadDir(g.index.dir)
	if err != nil && !os.IsNotExist(err) {
		return netip.Prefix{}, fmt.Errorf("allocate box address: %w", err)
	}
	for _, e := range entries {
		other := e.Name()
		if other == id {
			continue
		}
		if b := g.boxes[other]; b != nil && b.spec.Net != nil {
			used[b.spec.Net.Addr] = true
			continue
		}
		if dir := g.index.get(other); dir != "" {
			if spec, err := loadSpec(dir); err == nil && spec.Net != nil {
				used[spec.Net.Addr] = true
			}
		}
	}
	for _, b := range g.boxes { // started, not yet indexed
		if b.spec.Net != nil {
			used[b.spec.Net.Addr] = true
		}
	}
	pool := g.net.cfg.pool()
	for i := 0; ; i++ {
		p, ok := slot(pool, i)
		if !ok {
			return netip.Prefix{}, fmt.Errorf("allocate box address: every /30 of %s is taken", pool)
		}
		if !used[p] {
			return p, nil
		}
	}
}

// Networked implements Networker.
func (g *gvisor) Networked() bool { return g.net.cfg.Enabled() }

// SetEgress implements Networker: the chain changes in one nft transaction, then the spec keeps
// the policy for the next wake and the next engine.
func (g *gvisor) SetEgress(ctx context.Context, id string, e Egress) error {
	b, err := g.box(id)
	if err != nil {
		return fmt.Errorf("set egress of box %s: %w", id, err)
	}
	if err := e.Validate(); err != nil {
		return fmt.Errorf("set egress of box %s: %w", id, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.spec.Net == nil {
		return fmt.Errorf("set egress of box %s: it has no NIC: %w", id, ErrNoNetwork)
	}
	if err := g.net.policy(ctx, id, e); err != nil {
		return fmt.Errorf("set egress of box %s: %w", id, err)
	}
	spec := b.spec
	n := *spec.Net
	n.Egress = e
	spec.Net = &n
	if err := saveSpec(spec); err != nil {
		return fmt.Errorf("set egress of box %s: %w", id, err)
	}
	b.spec = spec
	return nil
}

// NetworkConfig is what an operator writes (config.Network): an uplink ("auto" for the host's
// default route's interface), its namespace, the pool and the resolvers, comma-separated.
type NetworkConfig struct {
	Uplink, UplinkNetns, Pool, DNS string
}

// ParseNetwork makes the Network a config describes; zero for no uplink. Resolvers default to
// the host's /etc/resolv.conf nameservers a box can reach (not loopback, where a stub resolver
// such as systemd-resolved listens for the host alone).
func ParseNetwork(c NetworkConfig) (Network, error) {
	if c.Uplink == "" || c.Uplink == "none" {
		return Network{}, nil
	}
	n := Network{Uplink: c.Uplink, UplinkNetns: c.UplinkNetns}
	if c.Uplink == "auto" {
		iface, err := defaultRouteInterface(c.UplinkNetns)
		if err != nil {
			return Network{}, fmt.Errorf("network uplink auto: %w", err)
		}
		n.Uplink = iface
	}
	if c.Pool != "" {
		p, err := netip.ParsePrefix(c.Pool)
		if err != nil || !p.Addr().Is4() || p.Bits() > 30 {
			return Network{}, fmt.Errorf("network pool: want an IPv4 CIDR of /30 or wider, got %q", c.Pool)
		}
		n.Pool = p.Masked()
	}
	for d := range strings.SplitSeq(c.DNS, ",") {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		a, err := netip.ParseAddr(d)
		if err != nil || !a.Is4() {
			return Network{}, fmt.Errorf("network dns: want IPv4 addresses, got %q", d)
		}
		n.DNS = append(n.DNS, a)
	}
	if len(n.DNS) == 0 {
		n.DNS = hostResolvers("/etc/resolv.conf")
		if len(n.DNS) == 0 {
			return Network{}, fmt.Errorf("network dns: /etc/resolv.conf names no resolver a box can reach (only loopback ones); set the resolvers")
		}
	}
	return n, nil
}

// hostResolvers are the IPv4 nameservers of a resolv.conf that are not loopback.
func hostResolvers(path string) []netip.Addr {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() && !a.IsLoopback() {
			out = append(out, a)
		}
	}
	return out
}
