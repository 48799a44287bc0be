package runtime

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A networked box is three things outside it, all named from its ID so that any engine process
// finds them again: a network namespace (boxNetns) that runsc puts the sandbox in, a veth pair
// from the router's namespace into it, and a chain of the router's nftables table that holds the
// box's egress policy. runsc moves the box end's address and route into gVisor's netstack when
// the sandbox starts, leaving the namespace without them, so they are put back before every run
// and restore: a restore into a bare namespace comes up with loopback only.

// nftTable is the router's table; every rule of every box is in it.
const nftTable = "cocoonbox"

// resolvConfFile is the box's resolv.conf in its Dir, bound over /etc/resolv.conf. A Dir that has
// one is a networked box's (args reads it so for every runsc command).
const resolvConfFile = "resolv.conf"

// boxNetns is the box's network namespace, as `ip netns` names it.
func boxNetns(id string) string { return "cb-" + strings.TrimPrefix(id, "sb_") }

// netnsPath is where `ip netns` keeps the namespace named name.
func netnsPath(name string) string { return filepath.Join("/var/run/netns", name) }

// veths returns the names of the box's veth ends: on the router and in the box. They must fit
// IFNAMSIZ (15), so they carry a hash of the ID rather than the ID.
func veths(id string) (router, box string) {
	h := sha256.Sum256([]byte(id))
	s := hex.EncodeToString(h[:5])
	return "cbh" + s, "cbb" + s
}

// boxChain is the name of the box's chain in nftTable.
func boxChain(id string) string {
	r, _ := veths(id)
	return "box_" + strings.TrimPrefix(r, "cbh")
}

// netctl sets up and tears down boxes' NICs.
type netctl struct{ cfg Network }

// run runs a command in the router's namespace (the host's when UplinkNetns is empty).
func (c netctl) run(ctx context.Context, stdin string, name string, args ...string) error {
	if c.cfg.UplinkNetns != "" {
		args = append([]string{"netns", "exec", c.cfg.UplinkNetns, name}, args...)
		name = "ip"
	}
	return runCmd(ctx, stdin, name, args...)
}

func runCmd(ctx context.Context, stdin, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, lastLine(out.Bytes()))
	}
	return nil
}

// routerIP runs `ip` on the router's side.
func (c netctl) routerIP(ctx context.Context, args ...string) error {
	if c.cfg.UplinkNetns != "" {
		args = append([]string{"-n", c.cfg.UplinkNetns}, args...)
	}
	return runCmd(ctx, "", "ip", args...)
}

// setup makes the box's NIC and policy, or puts back what is missing of them; it is idempotent.
// With reuse, when the namespace and its veth are still there (a wake, but the first after a
// host reboot) only the address and route runsc took are put back: the router's end, the policy
// chain and resolv.conf outlive the sandbox. A start makes everything anew.
func (c netctl) setup(ctx context.Context, spec Spec, reuse bool) error {
	ns := boxNetns(spec.ID)
	rv, bv := veths(spec.ID)
	_, nsErr := os.Stat(netnsPath(ns))
	if reuse && nsErr == nil && runCmd(ctx, "", "ip", "-n", ns, "link", "show", bv) == nil {
		return c.boxEnd(ctx, spec)
	}
	if err := c.base(ctx); err != nil {
		return err
	}
	if nsErr != nil {
		if err := runCmd(ctx, "", "ip", "netns", "add", ns); err != nil {
			return fmt.Errorf("box network: %w", err)
		}
	}
	_ = c.routerIP(ctx, "link", "del", rv) // a router end left without its peer
	if err := c.routerIP(ctx, "link", "add", rv, "type", "veth", "peer", "name", bv, "netns", ns); err != nil {
		return fmt.Errorf("box network: %w", err)
	}
	gw := netip.PrefixFrom(spec.Net.gateway(), spec.Net.Addr.Bits())
	for _, args := range [][]string{{"addr", "replace", gw.String(), "dev", rv}, {"link", "set", rv, "up"}} {
		if err := c.routerIP(ctx, args...); err != nil {
			return fmt.Errorf("box network: %w", err)
		}
	}
	if err := c.boxEnd(ctx, spec); err != nil {
		return err
	}
	if err := c.policy(ctx, spec.ID, spec.Net.Egress); err != nil {
		return err
	}
	var rc strings.Builder
	for _, d := range c.cfg.DNS {
		fmt.Fprintf(&rc, "nameserver %s\n", d)
	}
	if err := writeFileAtomic(filepath.Join(spec.Dir, resolvConfFile), []byte(rc.String())); err != nil {
		return fmt.Errorf("box network: %w", err)
	}
	return nil
}

// boxEnd gives the box's end of the veth its address and default route, which runsc moves into
// its netstack at every run and restore.
func (c netctl) boxEnd(ctx context.Context, spec Spec) error {
	ns := boxNetns(spec.ID)
	_, bv := veths(spec.ID)
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "replace", spec.Net.Addr.String(), "dev", bv},
		{"link", "set", bv, "up"},
		{"route", "replace", "default", "via", spec.Net.gateway().String()},
	} {
		if err := runCmd(ctx, "", "ip", append([]string{"-n", ns}, args...)...); err != nil {
			return fmt.Errorf("box network: %w", err)
		}
	}
	return nil
}

// base makes the router's table once: forwarding on, every box's traffic through its own chain
// (the boxes map, from the router end of its veth), nothing from a box to the router itself,
// nothing into a box but answers, and NAT out of the uplink.
func (c netctl) base(ctx context.Context) error {
	if err := c.run(ctx, "", "nft", "list", "table", "inet", nftTable); err == nil {
		return nil
	}
	if err := c.run(ctx, "", "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"); err != nil {
		return fmt.Errorf("box network: %w", err)
	}
	script := fmt.Sprintf(`table inet %[1]s {
	map boxes { type ifname : verdict; }
	chain forward {
		type filter hook forward priority filter; policy accept;
		iifname "cbh*" iifname vmap @boxes
		iifname "cbh*" drop
		oifname "cbh*" ct state established,related accept
		oifname "cbh*" drop
	}
	chain input {
		type filter hook input priority filter; policy accept;
		iifname "cbh*" drop
	}
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr %[2]s oifname %[3]q masquerade
	}
}
`, nftTable, c.cfg.pool(), c.cfg.Uplink)
	if err := c.run(ctx, script, "nft", "-f", "-"); err != nil {
		return fmt.Errorf("box network: %w", err)
	}
	return nil
}

// blocked are the destinations the internet policy refuses: this network, private, shared and
// link-local (cloud metadata at 169.254.169.254) ranges, loopback, multicast and reserved.
var blocked = []string{"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4"}

// policy replaces the box's chain with its egress policy and makes the box's traffic go through
// it, in one nft transaction.
func (c netctl) policy(ctx context.Context, id string, e Egress) error {
	if err := e.Validate(); err != nil {
		return err
	}
	rv, _ := veths(id)
	chain := boxChain(id)
	var b strings.Builder
	fmt.Fprintf(&b, "add chain inet %s %s\nflush chain inet %[1]s %[2]s\n", nftTable, chain)
	rule := func(format string, args ...any) {
		fmt.Fprintf(&b, "add rule inet %s %s ", nftTable, chain)
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	rule("oifname != %q drop", c.cfg.Uplink)
	rule("meta nfproto != ipv4 drop")
	for _, d := range c.cfg.DNS {
		rule("ip daddr %s udp dport 53 accept", d)
		rule("ip daddr %s tcp dport 53 accept", d)
	}
	switch e.Policy {
	case EgressInternet:
		rule("ip daddr { %s, %s } drop", strings.Join(blocked, ", "), c.cfg.pool())
		rule("accept")
	case EgressAllow:
		for _, a := range e.Allow {
			pfx, port, _ := parseAllow(a)
			if port == 0 {
				rule("ip daddr %s accept", pfx)
				continue
			}
			rule("ip daddr %s tcp dport %d accept", pfx, port)
			rule("ip daddr %s udp dport %d accept", pfx, port)
		}
		rule("drop")
	}
	fmt.Fprintf(&b, "add element inet %s boxes { %q : jump %s }\n", nftTable, rv, chain)
	if err := c.run(ctx, b.String(), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("box network policy: %w", err)
	}
	return nil
}

// teardown removes the box's policy and namespace; the veth pair goes with the namespace. What is
// already gone is fine.
func (c netctl) teardown(ctx context.Context, id string) error {
	rv, _ := veths(id)
	ns := boxNetns(id)
	_, err := os.Stat(netnsPath(ns))
	if !c.cfg.Enabled() && err != nil {
		return nil // no network here, and this box had none
	}
	if c.cfg.Enabled() && c.run(ctx, "", "nft", "list", "table", "inet", nftTable) == nil {
		_ = c.run(ctx, fmt.Sprintf("delete element inet %s boxes { %q }\n", nftTable, rv), "nft", "-f", "-")
		_ = c.run(ctx, fmt.Sprintf("delete chain inet %s %s\n", nftTable, boxChain(id)), "nft", "-f", "-")
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := runCmd(ctx, "", "ip", "netns", "del", ns); err != nil {
		return fmt.Errorf("remove box network: %w", err)
	}
	return nil
}

// defaultRouteInterface is the interface of the IPv4 default route in namespace ns (the host's
// when empty).
func defaultRouteInterface(ns string) (string, error) {
	args := []string{"-4", "route", "show", "default"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	out, err := exec.Command("ip", args...).Output()
	if err != nil {
		return "", fmt.Errorf("ip route: %w", err)
	}
	f := strings.Fields(string(out))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "dev" {
			return f[i+1], nil
		}
	}
	return "", fmt.Errorf("no default route to take the interface of")
}
