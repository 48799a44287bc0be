//go:build linux

// Package netlab builds a small internet of network namespaces for tests that give boxes a
// network: traffic stays in namespaces the test made, never on this machine's own networks.
package netlab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Lab is a small internet of network namespaces this test makes and removes: an "internet"
// namespace (198.18.0.1, from the benchmarking range, which is not private, so the default policy
// applies unchanged) serving HTTP and DNS, and a router namespace whose uplink leads only there.
// The runtime routes its boxes through the router, so no box packet can reach this machine's own
// networks or follow its default route. The internet also answers at addresses the policy must
// refuse (a private 10.99.0.1 and the metadata address 169.254.169.254), and the router runs a
// service of its own, standing for the host's: reachable without the policy, so each refusal is
// the policy's doing.
type Lab struct {
	Router, Inet string // namespace names
	Uplink       string // the router's interface to the internet
}

// The lab's addresses, names and ports.
const (
	Web       = "198.18.0.1" // the internet's web and DNS server (HTTP on WebPort and OtherPort)
	Router    = "198.18.0.2" // the router's uplink address
	Private   = "10.99.0.1"  // an internet address in a private range (HTTP on WebPort)
	Metadata  = "169.254.169.254"
	Name      = "web.test" // what the lab's DNS resolves to Web
	HostPort  = 9999       // the router's own HTTP service, standing for the host's
	WebPort   = 8080
	OtherPort = 8081
)

// New makes a lab and removes it when the test ends, even when it fails.
func New(t testing.TB) *Lab {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	s := hex.EncodeToString(b)
	l := &Lab{Router: "cbt-r-" + s, Inet: "cbt-i-" + s, Uplink: "cbtu" + s}
	t.Cleanup(func() { // the veths go with the namespaces
		for _, ns := range []string{l.Router, l.Inet} {
			if err := run(context.Background(), "ip", "netns", "del", ns); err != nil && !strings.Contains(err.Error(), "No such file") {
				t.Errorf("remove lab namespace: %v", err)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	steps := [][]string{
		{"netns", "add", l.Router},
		{"netns", "add", l.Inet},
		{"-n", l.Router, "link", "add", l.Uplink, "type", "veth", "peer", "name", "eth0", "netns", l.Inet},
		{"-n", l.Router, "link", "set", "lo", "up"},
		{"-n", l.Router, "addr", "add", Router + "/24", "dev", l.Uplink},
		{"-n", l.Router, "link", "set", l.Uplink, "up"},
		{"-n", l.Router, "route", "add", "default", "via", Web},
		{"-n", l.Inet, "link", "set", "lo", "up"},
		{"-n", l.Inet, "addr", "add", Web + "/24", "dev", "eth0"},
		{"-n", l.Inet, "addr", "add", Private + "/32", "dev", "lo"},
		{"-n", l.Inet, "addr", "add", Metadata + "/32", "dev", "lo"},
		{"-n", l.Inet, "link", "set", "eth0", "up"},
		{"-n", l.Inet, "route", "add", "10.0.0.0/8", "via", Router}, // answers to the boxes' pool
	}
	for _, st := range steps {
		if err := run(ctx, "ip", st...); err != nil {
			t.Fatal(err)
		}
	}
	for _, addr := range []string{fmt.Sprintf("%s:%d", Web, WebPort), fmt.Sprintf("%s:%d", Web, OtherPort), fmt.Sprintf("%s:%d", Private, WebPort), Metadata + ":80"} {
		l.serveHTTP(t, l.Inet, addr)
	}
	l.serveHTTP(t, l.Router, fmt.Sprintf("0.0.0.0:%d", HostPort))
	l.serveDNS(t)
	return l
}

// InNetns runs open (a listen or a dial) in namespace ns and returns what it made: a socket stays
// in the namespace it was made in, whichever thread uses it later.
func InNetns[T any](t testing.TB, ns string, open func() (T, error)) T {
	t.Helper()
	var v T
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // not unlocked: a thread that could not go back is dropped
		self, oerr := os.Open("/proc/thread-self/ns/net")
		target, terr := os.Open(filepath.Join("/var/run/netns", ns))
		if oerr != nil || terr != nil {
			err = fmt.Errorf("open namespaces: %v %v", oerr, terr)
			return
		}
		defer self.Close()
		defer target.Close()
		if err = unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			return
		}
		v, err = open()
		if serr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); serr == nil {
			runtime.UnlockOSThread()
		}
	}()
	<-done
	if err != nil {
		t.Fatalf("in namespace %s: %v", ns, err)
	}
	return v
}

func (l *Lab) serveHTTP(t testing.TB, ns, addr string) {
	ln := InNetns(t, ns, func() (net.Listener, error) { return net.Listen("tcp4", addr) })
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", addr)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// serveDNS answers A queries for Name with Web, and NXDOMAIN for anything else.
func (l *Lab) serveDNS(t testing.TB) {
	pc := InNetns(t, l.Inet, func() (net.PacketConn, error) { return net.ListenPacket("udp4", Web+":53") })
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
// Web when it asks for Name.
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
	found := strings.EqualFold(strings.Join(labels, "."), Name)
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
		ip := netip.MustParseAddr(Web).As4()
		resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4)
		resp = append(resp, ip[:]...)
	}
	return resp
}

// FetchScript connects to argv[1]:argv[2] from the box and prints "OK <the box's address> <body>"
// or "ERR <exception>": the base image's Python has sockets, not urllib.
const FetchScript = `import socket, sys
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

func run(ctx context.Context, name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
