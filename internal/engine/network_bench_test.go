package engine_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/netlab"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// The egress benchmarks fetch a page from the lab's internet (internal/netlab): from a box on the
// internet policy (gVisor's netstack, the veth, the router's policy chain and NAT) and, raw, from
// the router's own namespace, which is the same path without the box. Each sample is one TCP
// connect, request and whole answer, timed where it is made (in the box by Python, so the exec
// that starts the script is not counted).

// timedFetch fetches argv[1]:argv[2] and prints how long it took, in microseconds. The socket is
// blocking: a Python timeout makes it non-blocking and polled, which under gVisor costs several
// times the network's own latency (measured: 12 ms against 2.6 ms), and the exec's own deadline
// bounds a hang anyway.
const timedFetch = `import socket, sys, time
t = time.perf_counter()
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.connect((sys.argv[1], int(sys.argv[2])))
s.sendall(b"GET / HTTP/1.0\r\nHost: lab\r\n\r\n")
while s.recv(65536):
    pass
print(int((time.perf_counter() - t) * 1e6))
`

// BenchmarkBoxEgressFetch: a box on the internet policy fetches a page from the lab's internet.
func BenchmarkBoxEgressFetch(b *testing.B) {
	lab := netlab.New(b)
	rt, err := runtime.New(runtime.NameGVisor, runtime.Options{DataDir: filepath.Join(b.TempDir(), "rt"), Network: runtime.Network{
		Uplink: lab.Uplink, UplinkNetns: lab.Router, Pool: netip.MustParsePrefix("10.79.0.0/24"),
		DNS: []netip.Addr{netip.MustParseAddr(netlab.Web)},
	}})
	if err != nil {
		b.Fatal(err)
	}
	r := newBenchRuntime(b)
	sz := cocoonbox.Size(sandbox.SizeSmall).Spec()
	id := "sb_" + strings.Repeat("e", 16)
	spec := runtime.Spec{ID: id, Dir: filepath.Join(r.dir, "netboxes", id), Rootfs: r.rootfs, VCPUs: sz.VCPUs, MemoryMB: sz.MemoryMB, DiskMB: 1024,
		Net: &runtime.NetSpec{Egress: runtime.Egress{Policy: runtime.EgressInternet}}}
	ctx, cancel := context.WithTimeout(context.Background(), benchWaitLong)
	defer cancel()
	if err := rt.Start(ctx, spec); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := rt.Destroy(context.Background(), id); err != nil {
			b.Errorf("destroy: %v", err)
		}
		if c, ok := rt.(io.Closer); ok {
			_ = c.Close()
		}
	})
	fetch := func() time.Duration {
		var out strings.Builder
		code, err := rt.Exec(ctx, id, runtime.ExecRequest{Argv: []string{"python3", "-c", timedFetch, netlab.Web, strconv.Itoa(netlab.WebPort)}, Stdout: &out})
		us, perr := strconv.Atoi(strings.TrimSpace(out.String()))
		if err != nil || code != 0 || perr != nil {
			b.Fatalf("fetch from the box: code %d, %v, %q", code, err, out.String())
		}
		return time.Duration(us) * time.Microsecond
	}
	fetch() // the first connection also fills the ARP caches on the way
	var samples []time.Duration
	for b.Loop() {
		samples = append(samples, fetch())
	}
	benchreport.Latency(b, samples)
}

// BenchmarkRawHostFetch: the same fetch from the router's namespace, in Go.
func BenchmarkRawHostFetch(b *testing.B) {
	lab := netlab.New(b)
	addr := net.JoinHostPort(netlab.Web, strconv.Itoa(netlab.WebPort))
	fetch := func() time.Duration {
		t := time.Now()
		c := netlab.InNetns(b, lab.Router, func() (net.Conn, error) { return net.DialTimeout("tcp4", addr, 5*time.Second) })
		defer c.Close()
		if _, err := io.WriteString(c, "GET / HTTP/1.0\r\nHost: lab\r\n\r\n"); err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, c); err != nil {
			b.Fatal(err)
		}
		return time.Since(t)
	}
	fetch()
	var samples []time.Duration
	for b.Loop() {
		samples = append(samples, fetch())
	}
	benchreport.Latency(b, samples)
}
