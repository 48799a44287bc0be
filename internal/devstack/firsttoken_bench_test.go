package devstack_test

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/internal/benchreport"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
	"github.com/loomhand/cocoonbox/workflows"
)

// firstTokenPace is how long the scripted gateway waits before each text delta in
// BenchmarkAgentFirstToken: the first token leaves it that long after the request came.
const firstTokenPace = 300 * time.Millisecond

// BenchmarkAgentFirstToken: from when the scripted gateway sends a step's first text delta to
// when a WatchRun follower reads it (Streamed: the worker relaying the call, its NOTIFY, the API
// server's LISTEN, the stream), in turn with a client of the gateway itself reading it
// (RawGateway). The send time is the request's arrival plus the gateway's pace.
func BenchmarkAgentFirstToken(b *testing.B) {
	a := newAgentBench(b)
	var streamed, raw []time.Duration
	for r := range benchRounds() {
		follow := func() {
			reply := modeltest.Reply("first ", "rest")
			reply.Pace = firstTokenPace
			before := len(a.models.Requests())
			a.models.Script(reply)
			run, err := a.agents.StartRun(a.auth, &cbv1.StartRunRequest{Box: string(a.id), Task: "benchmark"})
			if err != nil {
				b.Fatal(err)
			}
			watch, err := a.agents.WatchRun(a.auth, &cbv1.WatchRunRequest{RunId: run.GetId()})
			if err != nil {
				b.Fatal(err)
			}
			var got time.Time
			for got.IsZero() {
				ev, err := watch.Recv()
				if err != nil {
					b.Fatalf("watch: %v before the first token", err)
				}
				if ev.GetText() != nil {
					got = time.Now()
				}
			}
			var res workflows.AgentRunResult
			if err := a.d.Temporal.GetWorkflow(a.ctx, workflows.AgentRunWorkflowID(run.GetId()), "").Get(a.ctx, &res); err != nil {
				b.Fatal(err)
			}
			reqs := a.models.Requests()
			if len(reqs) != before+1 {
				b.Fatalf("%d model calls; want 1", len(reqs)-before)
			}
			streamed = append(streamed, got.Sub(reqs[before].At.Add(firstTokenPace)))
		}
		direct := func() {
			reply := modeltest.Reply("first ", "rest")
			reply.Pace = firstTokenPace
			before := len(a.models.Requests())
			a.models.Script(reply)
			req, err := http.NewRequestWithContext(a.ctx, http.MethodPost, a.models.OpenAIBaseURL()+"/chat/completions",
				strings.NewReader(`{"model":"scripted-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+gatewayKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			var got time.Time
			for got.IsZero() && sc.Scan() {
				if strings.Contains(sc.Text(), `"first `) {
					got = time.Now()
				}
			}
			for sc.Scan() { // the rest of the answer
			}
			if got.IsZero() {
				b.Fatal("the gateway sent no first token")
			}
			raw = append(raw, got.Sub(a.models.Requests()[before].At.Add(firstTokenPace)))
		}
		if r%2 == 0 {
			follow()
			direct()
		} else {
			direct()
			follow()
		}
	}
	benchreport.Taken(b, "Streamed", streamed)
	benchreport.Taken(b, "RawGateway", raw)
}
