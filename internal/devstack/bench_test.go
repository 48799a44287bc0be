package devstack_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
)

// Benchmarks report p50/p95 in milliseconds over b.N samples; `make bench` turns them into
// docs/benchmarks.md. Each figure of ours stands beside the raw figure of the part underneath.

// BenchmarkDevStartFirst: `cocoonbox dev` on an empty data dir (initdb, schema, bootstrap).
func BenchmarkDevStartFirst(b *testing.B) {
	var samples []time.Duration
	for range b.N {
		cfg := benchConfig(b, filepath.Join(b.TempDir(), "home"))
		start := time.Now()
		d, err := devstack.Start(context.Background(), cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
		_ = d.Close()
	}
	benchreport.Latency(b, samples)
}

// BenchmarkDevStartRestart: `cocoonbox dev` on an existing data dir.
func BenchmarkDevStartRestart(b *testing.B) {
	cfg := benchConfig(b, filepath.Join(b.TempDir(), "home"))
	d, err := devstack.Start(context.Background(), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	_ = d.Close()
	var samples []time.Duration
	for range b.N {
		start := time.Now()
		d, err := devstack.Start(context.Background(), cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
		_ = d.Close()
	}
	benchreport.Latency(b, samples)
}

// BenchmarkRawTemporalStart: the embedded Temporal server alone on an existing data dir, the raw
// figure under BenchmarkDevStartRestart.
func BenchmarkRawTemporalStart(b *testing.B) {
	dir := b.TempDir()
	opts := devstack.TemporalOptions{DataDir: dir, UIPort: devstack.NoUI}
	t, err := devstack.StartTemporal(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	_ = t.Stop()
	var samples []time.Duration
	for range b.N {
		start := time.Now()
		t, err := devstack.StartTemporal(context.Background(), opts)
		if err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
		_ = t.Stop()
	}
	benchreport.Latency(b, samples)
}

func noopWorkflow(workflow.Context) error { return nil }

// noopWorker runs noopWorkflow on d's Temporal, polling queue, until b ends.
func noopWorker(b *testing.B, d *devstack.Dev, queue string) {
	b.Helper()
	w := worker.New(d.Temporal, queue, worker.Options{})
	w.RegisterWorkflow(noopWorkflow)
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
}

// BenchmarkWorkflowRoundTrip: start a trivial workflow and wait for its result, through the dev
// stack's Temporal client.
func BenchmarkWorkflowRoundTrip(b *testing.B) {
	d := benchDev(b)
	noopWorker(b, d, "bench")
	ctx := context.Background()
	var samples []time.Duration
	for i := range b.N {
		start := time.Now()
		run, err := d.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("bench-%d", i), TaskQueue: "bench"}, noopWorkflow)
		if err != nil {
			b.Fatal(err)
		}
		if err := run.Get(ctx, nil); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	benchreport.Latency(b, samples)
}

// BenchmarkRawTemporalRPC: one frontend RPC (health check), the raw figure under a workflow.
func BenchmarkRawTemporalRPC(b *testing.B) {
	d := benchDev(b)
	ctx := context.Background()
	var samples []time.Duration
	for range b.N {
		start := time.Now()
		if _, err := d.Temporal.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	benchreport.Latency(b, samples)
}

// BenchmarkAPIHealthz: GET /healthz, which checks Temporal, PostgreSQL and S3 in parallel.
func BenchmarkAPIHealthz(b *testing.B) {
	d := benchDev(b)
	url := d.URLs().API + "/healthz"
	var samples []time.Duration
	for range b.N {
		start := time.Now()
		resp, err := http.Get(url)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("healthz: %v %v", resp, err)
		}
		resp.Body.Close()
		samples = append(samples, time.Since(start))
	}
	benchreport.Latency(b, samples)
}

// BenchmarkAPIWhoAmI: one authenticated gRPC call (token hash lookup in PostgreSQL).
func BenchmarkAPIWhoAmI(b *testing.B) {
	d := benchDev(b)
	cli, err := config.LoadCLI(filepath.Join(d.Home(), "cli.yaml"), config.MapEnv(nil))
	if err != nil {
		b.Fatal(err)
	}
	var samples []time.Duration
	for range b.N {
		start := time.Now()
		if _, err := whoamiErr(cli.Endpoint, cli.Token); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	benchreport.Latency(b, samples)
}

func benchConfig(b *testing.B, home string) config.Dev {
	cfg := config.DefaultDev(config.MapEnv(map[string]string{"HOME": b.TempDir()}))
	cfg.Home = home
	cfg.CLIConfig = filepath.Join(home, "cli.yaml")
	cfg.Listen, cfg.TemporalListen, cfg.TemporalUIListen, cfg.S3Listen, cfg.EngineListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Template = "base" // the raw figures beside ours claim base boxes too
	cfg.Pools = nil       // cold unless a benchmark sets its pool
	return cfg
}

func benchDev(b *testing.B) *devstack.Dev {
	b.Helper()
	d, err := devstack.Start(context.Background(), benchConfig(b, filepath.Join(b.TempDir(), "home")), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close() })
	return d
}
