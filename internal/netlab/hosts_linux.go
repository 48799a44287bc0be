//go:build linux

package netlab

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Hosts is a small network of "hosts" for tests of a deployment over several machines: a bridge
// in this process's own namespace, which is the first host (the control plane, at Control), and
// one network namespace per other host, each on the bridge with an address of its own. The
// addresses are in 198.19.X.0/24 (the benchmarking range), X picked at random and checked
// unused, so nothing is sent off this machine.
type Hosts struct {
	Bridge  string
	Control string   // this namespace's address on the bridge
	Netns   []string // each other host's namespace
	Addrs   []string // each other host's address
}

// NewHosts makes n hosts besides this one and removes them, with the bridge, when the test ends,
// even when it fails.
func NewHosts(t testing.TB, n int) *Hosts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	tag := fmt.Sprintf("%02x%02x", b[0], b[1])
	subnet := -1
	for i := range 256 {
		x := (int(b[2]) + i) % 256
		if !routed(fmt.Sprintf("198.19.%d.1", x)) {
			subnet = x
			break
		}
	}
	if subnet < 0 {
		t.Fatal("no free /24 in 198.19.0.0/16 for the test hosts")
	}
	h := &Hosts{Bridge: "cbhb" + tag, Control: fmt.Sprintf("198.19.%d.1", subnet)}
	t.Cleanup(func() {
		for _, ns := range h.Netns {
			h.remove(t, ns)
		}
		if err := run(context.Background(), "ip", "link", "del", h.Bridge); err != nil && !strings.Contains(err.Error(), "Cannot find") {
			t.Errorf("remove the test hosts' bridge: %v", err)
		}
	})
	steps := [][]string{
		{"link", "add", h.Bridge, "type", "bridge"},
		{"addr", "add", h.Control + "/24", "dev", h.Bridge},
		{"link", "set", h.Bridge, "up"},
	}
	for i := range n {
		ns, veth, addr := fmt.Sprintf("cbh%s-%d", tag, i+1), fmt.Sprintf("cbhv%s%d", tag, i+1), fmt.Sprintf("198.19.%d.%d", subnet, 11+i)
		h.Netns, h.Addrs = append(h.Netns, ns), append(h.Addrs, addr)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"link", "set", veth, "master", h.Bridge, "up"},
			[]string{"-n", ns, "addr", "add", addr + "/24", "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"},
		)
	}
	for _, st := range steps {
		if err := run(ctx, "ip", st...); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// Command is name with args run in host i's network namespace. It enters that namespace alone
// (nsenter), not as `ip netns exec` does, which also gives the command a mount namespace with a
// fresh /sys, without the cgroup tree gVisor's runsc sets a box's limits in.
func (h *Hosts) Command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + h.Netns[i], "--", name}, args...)...)
}

// Remove takes host i off the network for good, as a machine that dies: its namespace goes,
// with its link to the bridge.
func (h *Hosts) Remove(t testing.TB, i int) {
	t.Helper()
	h.remove(t, h.Netns[i])
}

func (h *Hosts) remove(t testing.TB, ns string) {
	if err := run(context.Background(), "ip", "netns", "del", ns); err != nil && !strings.Contains(err.Error(), "No such file") {
		t.Errorf("remove test host %s: %v", ns, err)
	}
}

// routed reports whether this machine already has a route for addr other than its default one.
func routed(addr string) bool {
	out, err := exec.Command("ip", "-o", "route", "show", "match", addr).Output()
	if err != nil {
		return true
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" && !strings.HasPrefix(line, "default") {
			return true
		}
	}
	return net.ParseIP(addr) == nil
}
