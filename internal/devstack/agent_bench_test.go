package devstack_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/benchreport"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
	"github.com/loomhand/cocoonbox/workflows"
)

// Agent benchmarks: what a run's step costs beyond the model, with a scripted model that answers
// at once. The scripted server stamps each request's arrival, so the gap between two model calls
// of a run is everything between them: the tool call in the box, the step's end (journal, reply
// through the relay, row, activity completion), the workflow's next step and the next step's
// start (wake check, relay dial, credential, model link).

// agentBenchSteps is how many tool steps each sampled run makes.
const agentBenchSteps = 5

// BenchmarkAgentStep: the gap between consecutive model calls of a run whose steps each call the
// shell tool with true (Step), in turn with the raw agent call under a step (RawAgentInfo, as
// BenchmarkRawAgentInfo), so the two are taken in the same minutes of the box's life: taken
// apart, the raw figure moved by a quarter between runs of the same code.
func BenchmarkAgentStep(b *testing.B) {
	a := newAgentBench(b)
	raw := a.rawAgentInfo(b)
	var steps, raws []time.Duration
	for r := range max(benchRounds(), 10) {
		run := func() {
			turns := make([]modeltest.Turn, 0, agentBenchSteps+1)
			for range agentBenchSteps {
				turns = append(turns, modeltest.Calls(modeltest.Call("shell", `{"command":"true"}`)))
			}
			steps = append(steps, a.runGaps(b, append(turns, modeltest.Reply("done"))...)...)
		}
		rawCalls := func() {
			for range agentBenchSteps { // as many raw samples as step gaps
				raws = append(raws, raw(b))
			}
		}
		if r%2 == 0 {
			run()
			rawCalls()
		} else {
			rawCalls()
			run()
		}
	}
	benchreport.Taken(b, "Step", steps)
	benchreport.Taken(b, "RawAgentInfo", raws)
}

// agentLongRunSteps is the length of BenchmarkAgentLongRun's run: about what a desktop task takes.
const agentLongRunSteps = 40

// BenchmarkAgentLongRun: one run of agentLongRunSteps steps, each taking a desktop screenshot, as a
// computer-use loop does, so the conversation grows by an image a step. Step1 is the gap between
// the run's first two model calls, Step40 the gap after the 40th: a step's overhead must not grow
// with the run. Both come from the same runs, made in Step1's loop; Step40 reports them.
func BenchmarkAgentLongRun(b *testing.B) {
	a := newAgentBench(b)
	var at1, atLast []time.Duration
	b.Run("Step1", func(b *testing.B) {
		for b.Loop() {
			turns := make([]modeltest.Turn, 0, agentLongRunSteps+1)
			for range agentLongRunSteps {
				turns = append(turns, modeltest.Calls(modeltest.Call("desktop_screenshot", `{}`)))
			}
			gaps := a.runGaps(b, append(turns, modeltest.Reply("done"))...)
			at1, atLast = append(at1, gaps[0]), append(atLast, gaps[agentLongRunSteps-1])
		}
		benchreport.Latency(b, at1)
	})
	b.Run(fmt.Sprintf("Step%d", agentLongRunSteps), func(b *testing.B) {
		for b.Loop() {
		}
		benchreport.Latency(b, atLast)
	})
}

// BenchmarkAgentScreenshotToModel: from the model call that asks for a desktop screenshot to the
// model call that carries it (the screenshot, its downscale and PNG encoding, a step boundary,
// and the image's trip through the model link).
func BenchmarkAgentScreenshotToModel(b *testing.B) {
	a := newAgentBench(b)
	var samples []time.Duration
	for b.Loop() {
		gaps := a.runGaps(b, modeltest.Calls(modeltest.Call("desktop_screenshot", `{}`)), modeltest.Reply("seen"))
		if last := a.models.Requests(); !strings.Contains(string(last[len(last)-1].Body), "data:image/png;base64,") {
			b.Fatal("the model call after the screenshot carries no image")
		}
		samples = append(samples, gaps...)
	}
	benchreport.Latency(b, samples)
}

// BenchmarkRawAgentInfo: the floor under a step: dial the box's agent through the engine's ports
// relay and make one authenticated gRPC call (Info), with the sandbox client directly.
func BenchmarkRawAgentInfo(b *testing.B) {
	a := newAgentBench(b)
	raw := a.rawAgentInfo(b)
	var samples []time.Duration
	for b.Loop() {
		samples = append(samples, raw(b))
	}
	benchreport.Latency(b, samples)
}

// rawAgentInfo returns the raw agent call of BenchmarkRawAgentInfo on the bench's box, timed.
func (a *agentEnv) rawAgentInfo(b *testing.B) func(b *testing.B) time.Duration {
	ref, err := a.sandbox()
	if err != nil {
		b.Fatal(err)
	}
	cred := strings.TrimSpace(a.mustRun(b, "cat "+wire.CredentialPath))
	return func(b *testing.B) time.Duration {
		start := time.Now()
		conn, err := grpc.NewClient("passthrough:///agent", grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
				return a.eng.DialPort(ctx, ref, wire.AgentPort)
			}))
		if err != nil {
			b.Fatal(err)
		}
		ctx := metadata.AppendToOutgoingContext(a.ctx, "authorization", "Bearer "+cred)
		_, err = agentvmv1.NewInfoClient(conn).Get(ctx, &agentvmv1.GetInfoRequest{})
		took := time.Since(start)
		_ = conn.Close()
		if err != nil {
			b.Fatalf("info: %v", err)
		}
		return took
	}
}

// newAgentBench starts a desktop dev stack on the scripted gateway with a running desktop box
// whose agent has run once (so its credential is in the box and chromium-free tools are warm).
func newAgentBench(b *testing.B) *agentEnv {
	b.Helper()
	dir := shortTemp(b)
	models := modeltest.NewServer(b, gatewayKey)
	cfg := benchConfig(b, filepath.Join(dir, "h"))
	useGateway(&cfg, models)
	a := newAgentEnv(b, cfg, models, newDesktopEnv(b, cfg, boxBenchRun))
	a.runGaps(b, modeltest.Calls(modeltest.Call("desktop_screenshot", `{}`)), modeltest.Reply("warm"))
	return a
}

// runGaps runs the turns as one run, waits for its end and returns the gaps between its
// consecutive model calls.
func (a *agentEnv) runGaps(b testing.TB, turns ...modeltest.Turn) []time.Duration {
	b.Helper()
	before := len(a.models.Requests())
	a.models.Script(turns...)
	// One step a turn: the default step bound must not end a long run first.
	run, err := a.agents.StartRun(a.auth, &cbv1.StartRunRequest{Box: string(a.id), Task: "benchmark", MaxSteps: int32(len(turns))})
	if err != nil {
		b.Fatalf("start run: %v", err)
	}
	var res workflows.AgentRunResult
	if err := a.d.Temporal.GetWorkflow(a.ctx, workflows.AgentRunWorkflowID(run.GetId()), "").Get(a.ctx, &res); err != nil {
		b.Fatalf("run: %v", err)
	}
	reqs := a.models.Requests()[before:]
	if len(reqs) != len(turns) {
		b.Fatalf("%d model calls for %d turns", len(reqs), len(turns))
	}
	gaps := make([]time.Duration, 0, len(reqs)-1)
	for i := 1; i < len(reqs); i++ {
		gaps = append(gaps, reqs[i].At.Sub(reqs[i-1].At))
	}
	return gaps
}
