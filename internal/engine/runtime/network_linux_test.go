package runtime

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/netlab"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// fetch runs fetchScript in the box.
func (e *testEnv) fetch(t *testing.T, id, host string, port int) string {
	t.Helper()
	out, errOut, code, err := e.exec(id, "python3", "-c", netlab.FetchScript, host, fmt.Sprint(port))
	if err != nil || code != 0 {
		t.Fatalf("fetch %s:%d: code %d, err %v, stderr %q", host, port, code, err, errOut)
	}
	return strings.TrimSpace(out)
}

// mustFetch fetches and returns the box's address, failing unless the body is the server's.
func (e *testEnv) mustFetch(t *testing.T, id, host string, port int) string {
	t.Helper()
	out := e.fetch(t, id, host, port)
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "OK" || !strings.Contains(out, "hello from") {
		t.Fatalf("fetch %s:%d from %s: %s", host, port, id, out)
	}
	return f[1]
}

// mustNotReach fails unless the connection timed out: the policy drops, where a server that is
// not there would refuse at once.
func (e *testEnv) mustNotReach(t *testing.T, id, host string, port int) {
	t.Helper()
	if out := e.fetch(t, id, host, port); !strings.HasPrefix(out, "ERR") || !strings.Contains(out, "timed out") {
		t.Errorf("%s reached %s:%d (or was refused rather than dropped): %s", id, host, port, out)
	}
}

func newNetEnv(t *testing.T, l *netlab.Lab) *testEnv {
	t.Helper()
	e := newTestEnvWith(t, NameGVisor, Options{Network: Network{
		Uplink: l.Uplink, UplinkNetns: l.Router, Pool: netip.MustParsePrefix("10.77.0.0/24"),
		DNS: []netip.Addr{netip.MustParseAddr(netlab.Web)},
	}})
	return e
}

// TestBoxNetwork: a box with the internet policy reaches the lab's internet by address and by
// name, keeps its address and reaches it again at once after each of 20 hibernate/wake cycles,
// and reaches none of what the policy refuses: private and metadata addresses, the router (the
// host) and another box. An allow-list box reaches only what it lists; a box without a NIC
// reaches nothing.
func TestBoxNetwork(t *testing.T) {
	l := netlab.New(t)
	e := newNetEnv(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	spec := e.spec()
	spec.Net = &NetSpec{Egress: Egress{Policy: EgressInternet}}
	a := e.start(t, spec)
	addr := e.mustFetch(t, a.ID, netlab.Web, netlab.WebPort)
	if got := e.mustFetch(t, a.ID, netlab.Name, netlab.WebPort); got != addr {
		t.Fatalf("fetch by name came from %s, by address from %s", got, addr)
	}
	other := e.spec()
	other.Net = &NetSpec{Egress: Egress{Policy: EgressInternet}}
	b := e.start(t, other)
	bAddr := e.mustFetch(t, b.ID, netlab.Web, netlab.OtherPort)
	if bAddr == addr {
		t.Fatalf("two boxes share the address %s", addr)
	}
	gw := netip.MustParseAddr(addr).Prev().String()
	for _, dst := range []struct {
		host string
		port int
	}{{netlab.Private, netlab.WebPort}, {netlab.Metadata, 80}, {gw, netlab.HostPort}, {netlab.Router, netlab.HostPort}, {bAddr, 22}} {
		e.mustNotReach(t, a.ID, dst.host, dst.port)
	}

	for i := range 20 {
		if err := e.rt.Hibernate(ctx, a.ID); err != nil {
			t.Fatalf("hibernate %d: %v", i, err)
		}
		if err := e.rt.Wake(ctx, a.ID); err != nil {
			t.Fatalf("wake %d: %v", i, err)
		}
		if got := e.mustFetch(t, a.ID, netlab.Web, netlab.WebPort); got != addr {
			t.Fatalf("after wake %d the box's address is %s, was %s", i, got, addr)
		}
	}
	e.mustNotReach(t, a.ID, netlab.Metadata, 80) // the policy is still there after the wakes

	allow := e.spec()
	allow.Net = &NetSpec{Egress: Egress{Policy: EgressAllow, Allow: []string{fmt.Sprintf("%s:%d", netlab.Web, netlab.WebPort)}}}
	c := e.start(t, allow)
	e.mustFetch(t, c.ID, netlab.Name, netlab.WebPort) // the resolver is always allowed
	e.mustNotReach(t, c.ID, netlab.Web, netlab.OtherPort)

	none := e.start(t, e.spec())
	if out := e.fetch(t, none.ID, netlab.Web, netlab.WebPort); !strings.HasPrefix(out, "ERR") {
		t.Errorf("a box without a NIC reached the internet: %s", out)
	}
}

// TestBoxNetworkCleanup: destroying a networked box removes its namespace and its policy chain.
func TestBoxNetworkCleanup(t *testing.T) {
	l := netlab.New(t)
	e := newNetEnv(t, l)
	spec := e.spec()
	spec.Net = &NetSpec{Egress: Egress{Policy: EgressInternet}}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()
	if err := e.rt.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(netnsPath(boxNetns(spec.ID))); err != nil {
		t.Fatalf("the box's namespace: %v", err)
	}
	if err := e.rt.Destroy(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(netnsPath(boxNetns(spec.ID))); !os.IsNotExist(err) {
		t.Errorf("the box's namespace is still there: %v", err)
	}
	nc := netctl{cfg: Network{Uplink: l.Uplink, UplinkNetns: l.Router}}
	if err := nc.run(ctx, "", "nft", "list", "chain", "inet", nftTable, boxChain(spec.ID)); err == nil {
		t.Error("the box's policy chain is still there")
	}
}

// TestEgressValidate names what is wrong with a policy.
func TestEgressValidate(t *testing.T) {
	for _, tc := range []struct {
		e    Egress
		want string
	}{
		{Egress{Policy: "open"}, `unknown policy "open"`},
		{Egress{Policy: EgressAllow}, "needs at least one destination"},
		{Egress{Policy: EgressInternet, Allow: []string{"1.2.3.4"}}, "only the \"allow\" policy"},
		{Egress{Policy: EgressAllow, Allow: []string{"example.com:443"}}, "host names are not supported"},
		{Egress{Policy: EgressAllow, Allow: []string{"1.2.3.0/33"}}, "want an IPv4 address or CIDR"},
		{Egress{Policy: EgressAllow, Allow: []string{"1.2.3.4:0"}}, "the port must be 1 to 65535"},
		{Egress{Policy: EgressAllow, Allow: []string{"::1"}}, "want an IPv4"},
	} {
		if err := tc.e.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.e, err, tc.want)
		}
	}
	for _, ok := range []Egress{{Policy: EgressInternet}, {Policy: EgressAllow, Allow: []string{"1.2.3.4", "10.0.0.0/8:5432", "8.8.8.8:53"}}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// TestSlot: the pool's /30s, in order, until it ends.
func TestSlot(t *testing.T) {
	pool := netip.MustParsePrefix("10.77.0.0/24")
	if p, _ := slot(pool, 0); p.String() != "10.77.0.2/30" {
		t.Errorf("slot 0 = %s", p)
	}
	if p, _ := slot(pool, 63); p.String() != "10.77.0.254/30" {
		t.Errorf("slot 63 = %s", p)
	}
	if _, ok := slot(pool, 64); ok {
		t.Error("slot 64 of a /24 exists")
	}
}
