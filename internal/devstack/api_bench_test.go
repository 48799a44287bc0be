package devstack_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/benchreport"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// API benchmarks: a running box reached through the public API (gRPC, and MCP in
// mcp_bench_test.go) beside the same engine exec called with the sandbox client directly.

// apiBench is a box bench with a gRPC connection to the API as the dev user.
type apiBench struct {
	*boxBench
	conn  *grpc.ClientConn
	token string
	box   string
}

func newAPIBench(b *testing.B) *apiBench {
	b.Helper()
	e := newBoxBench(b)
	cli, err := config.LoadCLI(e.d.Bootstrap().CLIConfig, config.MapEnv(nil))
	if err != nil || cli.Token == "" {
		b.Fatalf("the dev user's token: %v", err)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(e.d.URLs().API, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	id := e.create(b)
	return &apiBench{boxBench: e, conn: conn, token: cli.Token, box: string(id)}
}

func (e *apiBench) authed() context.Context {
	return metadata.AppendToOutgoingContext(e.ctx, "authorization", "Bearer "+e.token)
}

// timeCalls runs call b.N times (as b.Loop decides) and reports the latency quantiles.
func timeCalls(b *testing.B, call func() error) {
	b.Helper()
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	benchreport.Latency(b, samples)
}

// BenchmarkAPI: calls on one running box through the public API (gRPC, MCP) beside the engine
// exec they make, called with the sandbox client directly on the same box's sandbox, in turn
// (interleaved).
func BenchmarkAPI(b *testing.B) {
	e := newAPIBench(b)
	boxes := cbv1.NewBoxServiceClient(e.conn)
	sb := e.sandboxOf(b, cocoonbox.BoxID(e.box))
	c, err := mcpConnect(e.ctx, b, e.d.URLs().API+"/mcp", e.token)
	if err != nil {
		b.Fatal(err)
	}
	var mcpExec mcp.CallToolRequest
	mcpExec.Params.Name = "box_exec"
	mcpExec.Params.Arguments = map[string]any{"box": e.box, "argv": []string{"true"}}
	interleaved(b, 50,
		// GetBox: token check, ownership check, workflow status query.
		timed{"GetBox", func(b *testing.B) time.Duration {
			return since(b, func() error {
				_, err := boxes.GetBox(e.authed(), &cbv1.GetBoxRequest{Box: e.box})
				return err
			})
		}},
		// Exec of `true`: token, role, the box row, engine exec, touch signal.
		timed{"Exec", func(b *testing.B) time.Duration {
			return since(b, func() error {
				_, err := boxes.Exec(e.authed(), &cbv1.ExecRequest{Box: e.box, Argv: []string{"true"}})
				return err
			})
		}},
		// RawEngineExecTrue: what Exec asks of the engine, POST /v1/sandboxes/{id}/exec.
		timed{"RawEngineExecTrue", func(b *testing.B) time.Duration {
			return since(b, func() error {
				_, err := e.eng.Exec(e.ctx, sb, sandbox.ExecRequest{Argv: []string{"true"}, TimeoutSeconds: 10})
				return err
			})
		}},
		// MCPExec: an MCP tools/call of box_exec `true` on a connected client (Streamable HTTP
		// POST, bearer auth, the same service layer as Exec).
		timed{"MCPExec", func(b *testing.B) time.Duration {
			return since(b, func() error {
				res, err := c.CallTool(e.ctx, mcpExec)
				if err == nil && res.IsError {
					err = fmt.Errorf("box_exec: %v", res.Content)
				}
				return err
			})
		}},
	)
}
