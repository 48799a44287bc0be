package engine_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// Benchmarks of the local engine over real gVisor boxes (see benchenv_test.go). Each Engine
// figure goes through the HTTP API with the sandbox client, and stands beside the Raw figure of
// the same work done by calling the runtime directly in the same run, so their ratio is what the
// engine's HTTP/API layer costs. `make bench` turns them into docs/benchmarks.md.
//
// Each benchmark does its setup once and takes one sample per b.Loop iteration; the untimed
// parts of an iteration (releasing a box, waking it for the next hibernate, waiting for a pool
// refill) do not enter the samples.

// lifecyclePause is how long a box sits, untimed, between a hibernate or wake and the next timed
// one. In use a box runs or sleeps for seconds at least; timing a wake on the heels of the
// hibernate before it measures the host still settling from the checkpoint (seen: the raw wake
// about 20% slower with no pause, the engine's less so, as its HTTP answer itself is a pause).
const lifecyclePause = 250 * time.Millisecond

// BenchmarkEngineClaimCold: a claim through the sandbox client (it lists by claim_ref, then posts
// /v1/claim) with no warm pool: the engine starts a box.
func BenchmarkEngineClaimCold(b *testing.B) {
	e := newBenchEngine(b)
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		sb := e.claim(b)
		samples = append(samples, time.Since(start))
		e.release(b, sb)
	}
	benchreport.Latency(b, samples)
}

// BenchmarkRawRuntimeStart: the runtime's Start alone (overlay, bundle, runsc run, first exec),
// the raw figure under a cold claim.
func BenchmarkRawRuntimeStart(b *testing.B) {
	r := newBenchRuntime(b)
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		id := r.start(b)
		samples = append(samples, time.Since(start))
		r.destroy(b, id)
	}
	benchreport.Latency(b, samples)
}

// BenchmarkEngineClaimWarm: the same claim served from a warm pool of one; the refill after each
// claim is waited for, untimed.
func BenchmarkEngineClaimWarm(b *testing.B) {
	e := newBenchEngine(b)
	ctx := context.Background()
	if _, err := e.cli.SetPools(ctx, []sandbox.PoolSpec{{Template: "base", Size: sandbox.SizeSmall, Warm: 1}}); err != nil {
		b.Fatal(err)
	}
	ready := func() bool {
		info, err := e.cli.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return len(info.Pools) == 1 && info.Pools[0].Warm == 1
	}
	var samples []time.Duration
	for b.Loop() {
		testutil.Eventually(b, benchWaitLong, "the warm pool to refill", ready)
		start := time.Now()
		sb := e.claim(b)
		samples = append(samples, time.Since(start))
		e.release(b, sb)
	}
	benchreport.Latency(b, samples)
	if _, err := e.cli.SetPools(ctx, nil); err != nil { // drain, so cleanup races no refill
		b.Fatal(err)
	}
}

// BenchmarkRawHTTPRoundTrip: GET /healthz on the same kind of engine. A warm claim calls no
// runtime at all, so its raw figure is the HTTP floor: the ratio is the claim's own bookkeeping
// (records and journal written to disk).
func BenchmarkRawHTTPRoundTrip(b *testing.B) {
	e := newBenchEngine(b)
	hc := sandbox.NewHTTPClient()
	get := func() {
		resp, err := hc.Get(e.url + "/healthz")
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("healthz: %v %v", resp, err)
		}
		_ = resp.Body.Close()
	}
	get() // open the kept-alive connection, as the sandbox client's is by the time it claims
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		get()
		samples = append(samples, time.Since(start))
	}
	benchreport.Latency(b, samples)
}

// BenchmarkEngineHibernate: POST /v1/sandboxes/{id}/hibernate on a running box (runsc checkpoint
// with its memory); the wake before the next sample is untimed.
func BenchmarkEngineHibernate(b *testing.B) {
	e := newBenchEngine(b)
	sb := e.claim(b)
	ctx := context.Background()
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		e.hibernate(b, sb)
		samples = append(samples, time.Since(start))
		if err := e.cli.Wake(ctx, sb); err != nil {
			b.Fatal(err)
		}
		e.exec(b, sb, "true")
		time.Sleep(lifecyclePause)
	}
	benchreport.Latency(b, samples)
}

// BenchmarkRawRuntimeHibernate: the runtime's Hibernate alone.
func BenchmarkRawRuntimeHibernate(b *testing.B) {
	r := newBenchRuntime(b)
	id := r.start(b)
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		r.hibernate(b, id)
		samples = append(samples, time.Since(start))
		r.wake(b, id)
		r.exec(b, id, "true")
		time.Sleep(lifecyclePause)
	}
	benchreport.Latency(b, samples)
}

// BenchmarkEngineWakeToExec: exec on a hibernated box, which the engine wakes transparently,
// until the command's output is back.
func BenchmarkEngineWakeToExec(b *testing.B) {
	e := newBenchEngine(b)
	sb := e.claim(b)
	var samples []time.Duration
	for b.Loop() {
		e.hibernate(b, sb)
		time.Sleep(lifecyclePause)
		start := time.Now()
		out := e.exec(b, sb, "echo", "awake")
		samples = append(samples, time.Since(start))
		if out != "awake\n" {
			b.Fatalf("exec after wake said %q", out)
		}
	}
	benchreport.Latency(b, samples)
}

// BenchmarkRawRuntimeWakeExec: the runtime's Wake (runsc restore) then Exec.
func BenchmarkRawRuntimeWakeExec(b *testing.B) {
	r := newBenchRuntime(b)
	id := r.start(b)
	var samples []time.Duration
	for b.Loop() {
		r.hibernate(b, id)
		time.Sleep(lifecyclePause)
		start := time.Now()
		r.wake(b, id)
		out := r.exec(b, id, "echo", "awake")
		samples = append(samples, time.Since(start))
		if out != "awake\n" {
			b.Fatalf("exec after wake said %q", out)
		}
	}
	benchreport.Latency(b, samples)
}

// BenchmarkEngineExec: POST /v1/sandboxes/{id}/exec of `echo ok` on a running box.
func BenchmarkEngineExec(b *testing.B) {
	e := newBenchEngine(b)
	sb := e.claim(b)
	e.exec(b, sb, "true") // the client's connection is open before the first sample
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		out := e.exec(b, sb, "echo", "ok")
		samples = append(samples, time.Since(start))
		if out != "ok\n" {
			b.Fatalf("exec said %q", out)
		}
	}
	benchreport.Latency(b, samples)
}

// BenchmarkRawRuntimeExec: the runtime's Exec of `echo ok` (runsc exec into the box's init).
func BenchmarkRawRuntimeExec(b *testing.B) {
	r := newBenchRuntime(b)
	id := r.start(b)
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		out := r.exec(b, id, "echo", "ok")
		samples = append(samples, time.Since(start))
		if out != "ok\n" {
			b.Fatalf("exec said %q", out)
		}
	}
	benchreport.Latency(b, samples)
}

// BenchmarkEngineRelayMBps: relayMiB MiB streamed into a sink in the box through the ports
// relay (client → engine over loopback TCP → the runtime's connection); opening the relay is
// untimed.
func BenchmarkEngineRelayMBps(b *testing.B) {
	e := newBenchEngine(b)
	sb := e.claim(b)
	e.exec(b, sb, sinkArgv...)
	testutil.Eventually(b, benchWaitShort, "the sink to listen", func() bool {
		res, err := e.cli.Exec(context.Background(), sb, sandbox.ExecRequest{Argv: []string{"test", "-e", sinkReady}})
		return err == nil && res.ExitCode == 0
	})
	var samples []time.Duration
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), benchWaitShort)
		c, err := e.cli.DialPort(ctx, sb, sinkPort)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		took, err := pump(c)
		if err != nil {
			b.Fatal(err)
		}
		samples = append(samples, took)
	}
	benchreport.Throughput(b, relayMiB<<20, samples)
}

// BenchmarkRawRuntimeDialMBps: the same stream over the runtime's Dial connection alone.
func BenchmarkRawRuntimeDialMBps(b *testing.B) {
	r := newBenchRuntime(b)
	id := r.start(b)
	r.exec(b, id, sinkArgv...)
	testutil.Eventually(b, benchWaitShort, "the sink to listen", func() bool {
		code, err := r.rt.Exec(context.Background(), id, runtime.ExecRequest{Argv: []string{"test", "-e", sinkReady}})
		return err == nil && code == 0
	})
	var samples []time.Duration
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), benchWaitShort)
		c, err := r.rt.Dial(ctx, id, sinkPort)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		took, err := pump(c)
		if err != nil {
			b.Fatal(err)
		}
		samples = append(samples, took)
	}
	benchreport.Throughput(b, relayMiB<<20, samples)
}

// BenchmarkEngineIdleMemory: memory use of a freshly claimed, idle box once it settles, as GET
// /v1/sandboxes/{id}/stats reports it; one box per sample.
func BenchmarkEngineIdleMemory(b *testing.B) {
	e := newBenchEngine(b)
	ctx := context.Background()
	var samples []float64
	for b.Loop() {
		sb := e.claim(b)
		samples = append(samples, settledMemory(b, func() (int64, error) {
			st, err := e.cli.Stats(ctx, sb.ID)
			if err == nil && !st.MemUsedMeasured {
				return 0, errUnmeasured
			}
			return st.MemUsedBytes, err
		}))
		e.release(b, sb)
	}
	benchreport.MiB(b, samples)
}

// BenchmarkRawRuntimeIdleMemory: the same figure from the runtime's Stats on a raw box.
func BenchmarkRawRuntimeIdleMemory(b *testing.B) {
	r := newBenchRuntime(b)
	ctx := context.Background()
	var samples []float64
	for b.Loop() {
		id := r.start(b)
		samples = append(samples, settledMemory(b, func() (int64, error) {
			st, err := r.rt.Stats(ctx, id)
			return st.MemUsedBytes, err
		}))
		r.destroy(b, id)
	}
	benchreport.MiB(b, samples)
}

// errUnmeasured is a stats answer with no measurement for a running box.
var errUnmeasured = errors.New("the engine reported no memory measurement")
