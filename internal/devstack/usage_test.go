package devstack_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// testRunUsage: over each protocol (chat completions, messages, responses), a run's model calls are in the ledger with the usage the
// scripted gateway reported, GetUsage and `cocoonbox usage --by run` show their sums, and a run
// whose --max-tokens is below what its first call used stops with budget before its second
// call, which the gateway never sees.
func testRunUsage(t *testing.T, a *agentEnv, models *modeltest.Server) {
	cli := buildCLI(t)
	paths := map[string]string{agentvm.ProviderOpenAI: "/v1/chat/completions", agentvm.ProviderAnthropic: "/v1/messages",
		agentvm.ProviderOpenAIResponses: "/v1/responses"}
	for _, provider := range []string{agentvm.ProviderOpenAI, agentvm.ProviderAnthropic, agentvm.ProviderOpenAIResponses} {
		a.useProvider(provider)
		tool := modeltest.Calls(modeltest.Call("shell", `{"command":"true"}`))
		tool.InputTokens, tool.OutputTokens = 1200, 34
		reply := modeltest.Reply("Done.")
		reply.InputTokens, reply.OutputTokens = 1300, 5
		models.Script(tool, reply)
		run := a.start(t, "Run true.")
		if got := a.waitRun(t, run.GetId(), 3*time.Minute, "succeeded", "failed"); got.GetState() != "succeeded" || got.GetTokensUsed() != 2539 {
			t.Fatalf("%s run: %s %q, %d tokens used; want succeeded with 2539", provider, got.GetState(), got.GetError(), got.GetTokensUsed())
		}
		usage, err := a.acct.GetUsage(a.auth, &cbv1.GetUsageRequest{By: "run", Since: timestamppb.New(time.Now().Add(-time.Hour))})
		if err != nil {
			t.Fatal(err)
		}
		var mine *cbv1.UsageRow
		for _, r := range usage.GetRows() {
			if r.GetKey() == run.GetId() {
				mine = r
			}
		}
		if mine == nil || mine.GetCalls() != 2 || mine.GetInputTokens() != 2500 || mine.GetOutputTokens() != 39 || mine.GetModel() != run.GetModel() {
			t.Fatalf("%s run's usage: %v; want 2 calls, 2500 in and 39 out", provider, mine)
		}
		if reqs := models.Requests(); reqs[len(reqs)-1].Path != paths[provider] {
			t.Fatalf("%s run's model calls went to %s; want %s", provider, reqs[len(reqs)-1].Path, paths[provider])
		}

		// The CLI shows the same sums.
		cmd := exec.CommandContext(a.ctx, cli, "usage", "--by", "run", "--since", "1h", "-o", "json")
		cmd.Env = []string{"HOME=" + t.TempDir(), "COCOONBOX_ENDPOINT=" + a.d.URLs().API, "COCOONBOX_TOKEN=" + a.token}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("cocoonbox usage: %v\\n%s", err, out)
		}
		var shown struct {
			Rows []struct {
				Key          string `json:"key"`
				Calls        string `json:"calls"`
				InputTokens  string `json:"input_tokens"`
				OutputTokens string `json:"output_tokens"`
			} `json:"rows"`
		}
		if err := json.Unmarshal(out, &shown); err != nil {
			t.Fatalf("cocoonbox usage -o json: %v\\n%s", err, out)
		}
		found := false
		for _, r := range shown.Rows {
			found = found || (r.Key == run.GetId() && r.Calls == "2" && r.InputTokens == "2500" && r.OutputTokens == "39")
		}
		if !found {
			t.Fatalf("cocoonbox usage --by run does not show run %s with 2 calls, 2500 in, 39 out:\\n%s", run.GetId(), out)
		}
	}

	// A bound the first call spends stops the run before the second. Only the first is scripted:
	// the subtests after this one share the script, and a second call, had it been made, is
	// counted below anyway.
	a.useProvider(agentvm.ProviderOpenAI)
	models.Script(modeltest.Calls(modeltest.Call("shell", `{"command":"true"}`)))
	before := len(models.Requests())
	run, err := a.agents.StartRun(a.auth, &cbv1.StartRunRequest{Box: string(a.id), Task: "Run true.", MaxTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	got := a.waitRun(t, run.GetId(), 3*time.Minute, "succeeded", "failed", "cancelled")
	if got.GetState() != string(cocoonbox.AgentRunFailed) || !strings.HasPrefix(got.GetError(), "budget: ") ||
		got.GetMaxTokens() != 12 || got.GetTokensUsed() != 15 {
		t.Fatalf("the bounded run: %s %q, %d of %d tokens; want failed with budget after 15 of 12", got.GetState(), got.GetError(), got.GetTokensUsed(), got.GetMaxTokens())
	}
	if n := len(models.Requests()) - before; n != 1 {
		t.Fatalf("the gateway saw %d calls of the bounded run; want 1", n)
	}
	if _, err := a.agents.StartRun(a.auth, &cbv1.StartRunRequest{Box: string(a.id), Task: "x", MaxTokens: -1}); err == nil || !strings.Contains(err.Error(), "max_tokens") {
		t.Fatalf("a negative bound: %v; want an error naming max_tokens", err)
	}

	// A user whose runs used their monthly budget: the next run stops before its first call.
	budget, err := a.acct.SetBudget(a.auth, &cbv1.SetBudgetRequest{User: a.owner.Name, TokensPerMonth: proto.Int64(100)})
	if err != nil || budget.GetTokensUsed() < 100 {
		t.Fatalf("set a budget below this month's use: %v, %v", budget, err)
	}
	before = len(models.Requests())
	run, err = a.agents.StartRun(a.auth, &cbv1.StartRunRequest{Box: string(a.id), Task: "Run true."})
	if err != nil {
		t.Fatal(err)
	}
	got = a.waitRun(t, run.GetId(), 3*time.Minute, "succeeded", "failed", "cancelled")
	if got.GetState() != string(cocoonbox.AgentRunFailed) || !strings.HasPrefix(got.GetError(), "budget: the runs of user "+a.owner.ID) ||
		len(models.Requests()) != before {
		t.Fatalf("a run over its starter's monthly budget: %s %q after %d model calls", got.GetState(), got.GetError(), len(models.Requests())-before)
	}
	if _, err := a.acct.SetBudget(a.auth, &cbv1.SetBudgetRequest{User: a.owner.Name, TokensPerMonth: proto.Int64(0)}); err != nil {
		t.Fatal(err)
	}

	// A box-hours budget the running box has used: no create, and no wake of the box once it
	// sleeps, by a person or by a run's step, saying why; while it runs it goes on.
	hours, err := a.acct.SetBudget(a.auth, &cbv1.SetBudgetRequest{User: a.owner.Name, BoxHoursPerMonth: proto.Float64(1e-6)})
	if err != nil || hours.GetBoxHoursUsed() <= 1e-6 {
		t.Fatalf("set a box-hours budget below this month's use: %v, %v", hours, err)
	}
	lift := func() {
		if _, err := a.acct.SetBudget(a.auth, &cbv1.SetBudgetRequest{User: a.owner.Name, BoxHoursPerMonth: proto.Float64(0)}); err != nil {
			t.Error(err)
		}
	}
	defer lift()
	if _, err := a.api.CreateBox(a.auth, &cbv1.CreateBoxRequest{Name: "over-budget", Size: "small"}); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "budget: the boxes of user") {
		t.Fatalf("a create over the box-hours budget: %v", err)
	}
	if _, err := a.api.WakeBox(a.auth, &cbv1.WakeBoxRequest{Box: string(a.id)}); err != nil {
		t.Fatalf("a wake of the running box, which starts nothing: %v", err)
	}
	if _, err := a.api.HibernateBox(a.auth, &cbv1.HibernateBoxRequest{Box: string(a.id)}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.api.WakeBox(a.auth, &cbv1.WakeBoxRequest{Box: string(a.id)}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a wake over the box-hours budget: %v", err)
	}
	before = len(models.Requests())
	run, err = a.agents.StartRun(a.auth, &cbv1.StartRunRequest{Box: string(a.id), Task: "Run true."})
	if err != nil {
		t.Fatal(err)
	}
	got = a.waitRun(t, run.GetId(), 3*time.Minute, "succeeded", "failed", "cancelled")
	if got.GetState() != string(cocoonbox.AgentRunFailed) || !strings.Contains(got.GetError(), "budget: the boxes of user") || len(models.Requests()) != before {
		t.Fatalf("a run on the sleeping box over the box-hours budget: %s %q after %d model calls", got.GetState(), got.GetError(), len(models.Requests())-before)
	}
	lift()
	if b, err := a.api.WakeBox(a.auth, &cbv1.WakeBoxRequest{Box: string(a.id)}); err != nil || b.GetState() != string(cocoonbox.BoxStateRunning) {
		t.Fatalf("the wake once the budget is lifted: %v, %v", b, err)
	}

	// A model this server allows but the gateway does not list fails the run at its first step,
	// before any model call, naming the models the gateway has.
	models.SetModels("scripted-1")
	defer models.SetModels()
	before = len(models.Requests())
	run, err = a.agents.StartRun(a.auth, &cbv1.StartRunRequest{Box: string(a.id), Task: "Run true.", Model: "scripted-2"})
	if err != nil {
		t.Fatal(err)
	}
	got = a.waitRun(t, run.GetId(), 3*time.Minute, "succeeded", "failed", "cancelled")
	if got.GetState() != string(cocoonbox.AgentRunFailed) || !strings.Contains(got.GetError(), `model "scripted-2" is not offered by the gateway (its GET /models lists scripted-1)`) {
		t.Fatalf("a run on a model the gateway lacks: %s %q", got.GetState(), got.GetError())
	}
	if n := len(models.Requests()) - before; n != 0 {
		t.Fatalf("%d model calls of a run on a model the gateway lacks; want none", n)
	}
}
