package runtime

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

// netLab is a small internet of network namespaces this test makes and removes: an "internet"
// namespace (198.18.0.1, from the benchmarking range, which is not private, so the default policy
// applies unchanged) serving HTTP and DNS, and a router namespace whose uplink leads only there.
// The runtime routes its boxes through the router, so no box packet can reach this machine's own
// networks or follow its default route. The internet also answers at addresses the policy must
// refuse (a private 10.99.0.1 and the metadata address 169.254.169.254), and the router runs a
// service of its own, standing for the host's: reachable without the policy, so each refusal is
// the policy's doing.
type netLab struct {
	router, inet string // namespace names
	uplink       string // the router's interface to the internet
}

const (
	labWeb      = "198.18.0.1"
	labRouter   = "198.18.0.2" // the router's uplink address
	labPrivate  = "10.99.0.1"
	labMetadata = "169.254.169.254"
	labName     = "web.test" // what the lab's DNS resolves to labWeb
	labHostPort = 9999       // the router's own service
)

func newNetLab(t *testing.T) *netLab {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	s := hex.EncodeToString(b)
	l := &netLab{router: "cbt-r-" + s, inet: "cbt-i-" + s, uplink: "cbtu" + s}
	t.Cleanup(func() { // the veths go with the namespaces
		for _, ns := range []string{l.router, l.inet} {
			if err := runCmd(context.Background(), "", "ip", "netns", "del", ns); err != nil && !strings.Contains(err.Error(), "No such file") {
				t.Errorf("remove lab namespace: %v", err)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitShort)
	defer cancel()
	steps := [][]string{
		{"netns", "add", l.router},
		{"netns", "add", l.inet},
		{"-n", l.router, "link", "add", l.uplink, "type", "veth", "peer", "name", "eth0", "netns", l.inet},
		{"-n", l.router, "link", "set", "lo", "up"},
		{"-n", l.router, "addr", "add", labRouter + "/24", "dev", l.uplink},
		{"-n", l.router, "link", "set", l.uplink, "up"},
		{"-n", l.router, "route", "add", "default", "via", labWeb},
		{"-n", l.inet, "link", "set", "lo", "up"},
		{"-n", l.inet, "addr", "add", labWeb + "/24", "dev", "eth0"},
		{"-n", l.inet, "addr", "add", labPrivate + "/32", "dev", "lo"},
		{"-n", l.inet, "addr", "add", labMetadata + "/32", "dev", "lo"},
		{"-n", l.inet, "link", "set", "eth0", "up"},
		{"-n", l.inet, "route", "add", "10.0.0.0/8", "via", labRouter}, // answers to the boxes' pool
	}
	for _, st := range steps {
		if err := runCmd(ctx, "", "ip", st...); err != nil {
			t.Fatal(err)
		}
	}
	for _, addr := range []string{labWeb + ":8080", labWeb + ":8081", labPrivate + ":8080", labMetadata + ":80"} {
		l.serveHTTP(t, l.inet, addr)
	}
	l.serveHTTP(t, l.router, fmt.Sprintf("0.0.0.0:%d", labHostPort))
	l.serveDNS(t)
	return l
}

// listenIn opens a listener (or packet conn) in namespace ns: a socket stays in the namespace it
// was made in, whichever thread serves it later.
func listenIn[T any](t *testing.T, ns string, listen func() (T, error)) T {
	t.Helper()
	var v T
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		goruntime.LockOSThread() // not unlocked: a thread that could not go back is dropped
		self, oerr := os.Open("/proc/thread-self/ns/net")
		target, terr := os.Open(netnsPath(ns))
		if oerr != nil || terr != nil {
			err = fmt.Errorf("open namespaces: %v %v", oerr, terr)
			return
		}
		defer self.Close()
		defer target.Close()
		if err = unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			return
		}
		v, err = listen()
		if serr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); serr == nil {
			goruntime.UnlockOSThread()
		}
	}()
	<-done
	if err != nil {
		t.Fatalf("listen in %s: %v", ns, err)
	}
	return v
}

func (l *netLab) serveHTTP(t *testing.T, ns, addr string) {
	ln := listenIn(t, ns, func() (net.Listener, error) { return net.Listen("tcp4", addr) })
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", addr)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// serveDNS answers A queries for labName with labWeb, and NXDOMAIN for anything else.
func (l *netLab) serveDNS(t *testing.T) {
	pc := listenIn(t, l.inet, func() (net.PacketConn, error) { return net.ListenPacket("udp4", labWeb+":53") })
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if ans := dnsAnswer(buf[:n]); ans != nil {
				_, _ = pc.WriteTo(ans, from)
			}
		}
	}()
}

// dnsAnswer is the answer to one DNS query (RFC 1035 §4): the question echoed, and an A record of
// labWeb when it asks for labName.
func dnsAnswer(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	var labels []string
	i := 12
	for i < len(q) && q[i] != 0 {
		n := int(q[i])
		if i+1+n > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+n]))
		i += 1 + n
	}
	if i+5 > len(q) {
		return nil
	}
	question := q[12 : i+5]
	qtype := binary.BigEndian.Uint16(q[i+1 : i+3])
	found := strings.EqualFold(strings.Join(labels, "."), labName)
	resp := append([]byte{}, q[:2]...)
	flags, ancount := uint16(0x8180), uint16(0) // a response, recursion available
	if !found {
		flags |= 3 // NXDOMAIN
	} else if qtype == 1 {
		ancount = 1
	}
	resp = binary.BigEndian.AppendUint16(resp, flags)
	resp = binary.BigEndian.AppendUint16(resp, 1)
	resp = binary.BigEndian.AppendUint16(resp, ancount)
	resp = append(resp, 0, 0, 0, 0)
	resp = append(resp, question...)
	if ancount == 1 {
		ip := netip.MustParseAddr(labWeb).As4()
		resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4)
		resp = append(resp, ip[:]...)
	}
	return resp
}

// fetchScript connects to argv[1]:argv[2] from the box and prints "OK <the box's address> <body>"
// or "ERR <exception>": the base image's Python has sockets, not urllib.
const fetchScript = `import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
    s.sendall(b"GET / HTTP/1.0\r\nHost: lab\r\n\r\n")
    d = b""
    while True:
        c = s.recv(4096)
        if not c:
            break
        d += c
    print("OK", s.getsockname()[0], d.split(b"\r\n\r\n", 1)[-1].decode())
except Exception as e:
    print("ERR", type(e).__name__, e)
`

// fetch runs fetchScript in the box.
func (e *testEnv) fetch(t *testing.T, id, host string, port int) string {
	t.Helper()
	out, errOut, code, err := e.exec(id, "python3", "-c", fetchScript, host, fmt.Sprint(port))
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

func newNetEnv(t *testing.T, l *netLab) *testEnv {
	t.Helper()
	e := newTestEnvWith(t, NameGVisor, Options{Network: Network{
		Uplink: l.uplink, UplinkNetns: l.router, Pool: netip.MustParsePrefix("10.77.0.0/24"),
		DNS: []netip.Addr{netip.MustParseAddr(labWeb)},
	}})
	return e
}

// TestBoxNetwork: a box with the internet policy reaches the lab's internet by address and by
// name, keeps its address and reaches it again at once after each of 20 hibernate/wake cycles,
// and reaches none of what the policy refuses: private and metadata addresses, the router (the
// host) and another box. An allow-list box reaches only what it lists; a box without a NIC
// reaches nothing.
func TestBoxNetwork(t *testing.T) {
	l := newNetLab(t)
	e := newNetEnv(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	spec := e.spec()
	spec.Net = &NetSpec{Egress: Egress{Policy: EgressInternet}}
	a := e.start(t, spec)
	addr := e.mustFetch(t, a.ID, labWeb, 8080)
	if got := e.mustFetch(t, a.ID, labName, 8080); got != addr {
		t.Fatalf("fetch by name came from %s, by address from %s", got, addr)
	}
	other := e.spec()
	other.Net = &NetSpec{Egress: Egress{Policy: EgressInternet}}
	b := e.start(t, other)
	bAddr := e.mustFetch(t, b.ID, labWeb, 8081)
	if bAddr == addr {
		t.Fatalf("two boxes share the address %s", addr)
	}
	gw := netip.MustParseAddr(addr).Prev().String()
	for _, dst := range []struct {
		host string
		port int
	}{{labPrivate, 8080}, {labMetadata, 80}, {gw, labHostPort}, {labRouter, labHostPort}, {bAddr, 22}} {
		e.mustNotReach(t, a.ID, dst.host, dst.port)
	}

	for i := range 20 {
		if err := e.rt.Hibernate(ctx, a.ID); err != nil {
			t.Fatalf("hibernate %d: %v", i, err)
		}
		if err := e.rt.Wake(ctx, a.ID); err != nil {
			t.Fatalf("wake %d: %v", i, err)
		}
		if got := e.mustFetch(t, a.ID, labWeb, 8080); got != addr {
			t.Fatalf("after wake %d the box's address is %s, was %s", i, got, addr)
		}
	}
	e.mustNotReach(t, a.ID, labMetadata, 80) // the policy is still there after the wakes

	allow := e.spec()
	allow.Net = &NetSpec{Egress: Egress{Policy: EgressAllow, Allow: []string{labWeb + ":8080"}}}
	c := e.start(t, allow)
	e.mustFetch(t, c.ID, labName, 8080) // the resolver is always allowed
	e.mustNotReach(t, c.ID, labWeb, 8081)

	none := e.start(t, e.spec())
	if out := e.fetch(t, none.ID, labWeb, 8080); !strings.HasPrefix(out, "ERR") {
		t.Errorf("a box without a NIC reached the internet: %s", out)
	}
}

// TestBoxNetworkCleanup: destroying a networked box removes its namespace and its policy chain.
func TestBoxNetworkCleanup(t *testing.T) {
	l := newNetLab(t)
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
	nc := netctl{cfg: Network{Uplink: l.uplink, UplinkNetns: l.router}}
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
