package api_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/api"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// agentFixture serves the API over a store holding ann's box with one failed run of two steps,
// as the run's workflow would have recorded it. No Temporal: only calls that read runs, or fail
// before starting one, work.
func agentFixture(t *testing.T) (f fixture, token, runID string) {
	t.Helper()
	ctx := context.Background()
	st := storetest.New(t)
	f = serveOpts(t, api.Options{Store: st, Version: "test", Boxes: &boxsvc.Service{Store: st, WatchEvery: 10 * time.Millisecond}})
	u, _, token := f.mint(t, "ann", false)
	box := cocoonbox.NewBoxID()
	if _, err := st.CreateBox(ctx, store.NewBox{ID: box, Owner: u.ID, Name: "dev", Size: cocoonbox.DefaultSize}); err != nil {
		t.Fatal(err)
	}
	runID = "run_a"
	if _, err := st.CreateAgentRun(ctx, store.NewAgentRun{ID: runID, BoxID: box, Owner: u.ID, Task: "fix the site", Provider: "openai", Model: "gpt-x"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []store.NewAgentStep{
		{RunID: runID, Step: 1, Kind: "model_turn", Summary: "called shell",
			Payload: json.RawMessage(`{"text":"Let me look.","message":"hurry","tool_calls":[{"name":"shell","is_error":true,"result":"exit 1"},{"name":"screenshot","images":1}]}`)},
		{RunID: runID, Step: 2, Kind: "model_turn", Summary: "The site is down.", Payload: json.RawMessage(`{"text":"The site is down.","done":true,"stop_reason":"end_turn"}`)},
	} {
		if err := st.AppendAgentStep(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetAgentRunState(ctx, runID, cocoonbox.AgentRunFailed, "model: 400 context too long"); err != nil {
		t.Fatal(err)
	}
	return f, token, runID
}

func TestAgentRunOverGRPC(t *testing.T) {
	f, token, runID := agentFixture(t)
	agent := cbv1.NewAgentServiceClient(f.conn(t))
	ctx := as(t, token)

	run, err := agent.GetRun(ctx, &cbv1.GetRunRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	if run.GetState() != "failed" || run.GetError() != "model: 400 context too long" || run.GetStepsDone() != 2 ||
		run.GetResult() != "The site is down." || run.GetProvider() != "openai" || len(run.GetSteps()) != 2 {
		t.Fatalf("run %v", run)
	}
	s1 := run.GetSteps()[0]
	if s1.GetText() != "Let me look." || s1.GetMessage() != "hurry" || len(s1.GetToolCalls()) != 2 ||
		!s1.GetToolCalls()[0].GetIsError() || s1.GetToolCalls()[0].GetResult() != "exit 1" || s1.GetToolCalls()[1].GetImages() != 1 {
		t.Fatalf("step 1 %v", s1)
	}
	if s2 := run.GetSteps()[1]; !s2.GetDone() || s2.GetStopReason() != "end_turn" {
		t.Fatalf("step 2 %v", s2)
	}

	// An ended run streams its steps, then its final state, then ends.
	stream, err := agent.WatchRun(ctx, &cbv1.WatchRunRequest{RunId: runID})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.GetStep() != nil:
			got = append(got, "step "+ev.GetStep().GetSummary())
		case ev.GetRun() != nil:
			if len(ev.GetRun().GetSteps()) != 0 {
				t.Errorf("run event carries steps: %v", ev.GetRun())
			}
			got = append(got, "run "+ev.GetRun().GetState()+" "+ev.GetRun().GetError())
		}
	}
	if want := "step called shell|step The site is down.|run failed model: 400 context too long"; strings.Join(got, "|") != want {
		t.Fatalf("events %q, want %q", got, want)
	}

	// An unknown run is not found, as for GetRun.
	stream, err = agent.WatchRun(ctx, &cbv1.WatchRunRequest{RunId: "run_nope"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.NotFound {
		t.Fatalf("watch unknown run: %v", err)
	}
	if _, err := agent.StartRun(ctx, &cbv1.StartRunRequest{Box: "dev", Task: "x", Model: "m", MaxSteps: -1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("negative max_steps: %v", err)
	}
}

func TestAgentMCPTools(t *testing.T) {
	f, token, runID := agentFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.NewStreamableHttpClient("http://"+f.addr+"/mcp",
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	call := func(name string, args map[string]any) (string, bool) {
		t.Helper()
		var req mcp.CallToolRequest
		req.Params.Name, req.Params.Arguments = name, args
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var b strings.Builder
		for _, ct := range res.Content {
			if tc, ok := mcp.AsTextContent(ct); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String(), res.IsError
	}

	text, isErr := call("agent_status", map[string]any{"run": runID})
	var st struct {
		State, Error, Result string
		StepsDone            int `json:"steps_done"`
		Steps                []struct {
			Number      int
			Summary     string
			Message     string
			FailedTools []string `json:"failed_tools"`
		}
	}
	if err := json.Unmarshal([]byte(text), &st); isErr || err != nil {
		t.Fatalf("agent_status: %s (%v)", text, err)
	}
	if st.State != "failed" || st.Error != "model: 400 context too long" || st.Result != "The site is down." || st.StepsDone != 2 ||
		len(st.Steps) != 2 || st.Steps[0].Summary != "called shell" || st.Steps[0].Message != "hurry" ||
		len(st.Steps[0].FailedTools) != 1 || st.Steps[0].FailedTools[0] != "shell" {
		t.Fatalf("agent_status: %s", text)
	}

	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"agent_status", map[string]any{"run": "run_nope"}, "not_found: run run_nope not found"},
		{"agent_message", map[string]any{"run": runID, "text": "and the db?"}, "conflict: run run_a is failed"},
		{"agent_run", map[string]any{"box": "dev", "task": "look", "wait": true}, "unavailable: agent runs are not configured on this server"},
		{"agent_run", map[string]any{"box": "nope", "task": "look"}, `not_found: box "nope" not found`},
	} {
		if text, isErr := call(tc.name, tc.args); !isErr || !strings.HasPrefix(text, tc.want) {
			t.Errorf("%s %v: %q (isError %v), want it to start %q", tc.name, tc.args, text, isErr, tc.want)
		}
	}
}
