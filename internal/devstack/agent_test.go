package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
	"github.com/loomhand/cocoonbox/workflows"
)

// Agent runs end to end: the API starts a run, the run workflow drives the real cocoonbox-agent
// in a desktop box under gVisor, and the agent's model calls reach a scripted model server (the
// real OpenAI and Anthropic wire formats) only through the worker's model link, since a box has
// no network of its own.

// gatewayKey is the scripted gateway's key; it lives in the owner's vault as gatewaySecret.
const (
	gatewayKey    = "sk-gateway-test-3f9a"
	gatewaySecret = "GATEWAY_KEY"
)

// agentRunHistoryFile is the committed agent run history workflows/replay_test.go replays;
// TestAgentRuns rewrites it when COCOONBOX_WRITE_HISTORY=1:
//
//	COCOONBOX_WRITE_HISTORY=1 go test -run 'TestAgentRuns/take_over' ./internal/devstack/
var agentRunHistoryFile = filepath.Join("..", "..", "workflows", "testdata", "histories", "agent_run.json")

// agentEnv is a desktop box with an agent, the scripted gateway and API clients of its owner.
type agentEnv struct {
	*desktopEnv
	models *modeltest.Server
	agents cbv1.AgentServiceClient
	acct   cbv1.AccountServiceClient
	auth   context.Context // e.ctx with the owner's bearer token
}

// agentConfig is a desktop stack whose agent runs use the scripted gateway.
func agentConfig(t *testing.T, models *modeltest.Server) config.Dev {
	cfg := boxConfig(t)
	useGateway(&cfg, models)
	return cfg
}

// useGateway makes cfg claim desktop boxes and run agents on the scripted gateway.
func useGateway(cfg *config.Dev, models *modeltest.Server) {
	cfg.Template = "desktop"
	cfg.Agent = config.Agent{Provider: "openai", BaseURL: models.OpenAIBaseURL(), Model: "scripted-1",
		Models: []string{"scripted-1", "scripted-2"}, KeySecret: gatewaySecret, MaxSteps: 8}
}

func newAgentEnv(t testing.TB, cfg config.Dev, models *modeltest.Server, e *desktopEnv) *agentEnv {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(e.d.URLs().API, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	a := &agentEnv{desktopEnv: e, models: models, agents: cbv1.NewAgentServiceClient(conn), acct: cbv1.NewAccountServiceClient(conn),
		auth: metadata.AppendToOutgoingContext(e.ctx, "authorization", "Bearer "+e.token)}
	if _, err := cbv1.NewVaultServiceClient(conn).SetSecret(a.auth, &cbv1.SetSecretRequest{Name: gatewaySecret, Value: gatewayKey}); err != nil {
		t.Fatal(err)
	}
	return a
}

// viewerClient is the context of a new user the owner shared the box with as a viewer.
func (a *agentEnv) viewerClient(t *testing.T) context.Context {
	t.Helper()
	u, err := a.d.Store.CreateUser(a.ctx, store.NewUser{Name: "watcher"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := store.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.d.Store.CreateToken(a.ctx, u.ID, "test", store.HashToken(raw)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.d.Boxes.Share(a.ctx, a.owner.ID, a.id, u.Name, cocoonbox.RoleViewer, nil); err != nil {
		t.Fatal(err)
	}
	return metadata.AppendToOutgoingContext(a.ctx, "authorization", "Bearer "+raw)
}

// useProvider points new runs at the scripted gateway's endpoint for provider.
func (a *agentEnv) useProvider(provider string) {
	cfg := a.d.Boxes.Agent
	cfg.Provider, cfg.BaseURL = provider, a.models.OpenAIBaseURL()
	if provider == agentvm.ProviderAnthropic {
		cfg.BaseURL = a.models.AnthropicBaseURL()
	}
	devstack.SetAgent(a.d, cfg)
}

func (a *agentEnv) start(t testing.TB, task string) *cbv1.AgentRun {
	t.Helper()
	run, err := a.agents.StartRun(a.auth, &cbv1.StartRunRequest{Box: string(a.id), Task: task})
	if err != nil {
		t.Fatalf("start run: %v", err)
	}
	return run
}

// waitRun polls the run until its state is one of states and returns it.
func (a *agentEnv) waitRun(t *testing.T, id string, within time.Duration, states ...string) *cbv1.AgentRun {
	t.Helper()
	var run *cbv1.AgentRun
	if err := testutil.Poll(a.ctx, within, func() error {
		var err error
		if run, err = a.agents.GetRun(a.auth, &cbv1.GetRunRequest{RunId: id}); err != nil {
			return err
		}
		if !slices.Contains(states, run.GetState()) {
			return fmt.Errorf("run %s is %s (error %q), want %v", id, run.GetState(), run.GetError(), states)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return run
}

// toolResults are the results of the run's tool calls called name, in order.
func toolResults(run *cbv1.AgentRun, name string) []string {
	var out []string
	for _, s := range run.GetSteps() {
		for _, c := range s.GetToolCalls() {
			if c.GetName() == name {
				out = append(out, c.GetResult())
			}
		}
	}
	return out
}

// TestAgentRuns drives one desktop box's agent through the acceptance cases of agent runs, each
// a subtest on the same box: a shell run over the OpenAI protocol followed through WatchRun, a
// browser run over the Anthropic protocol that a viewer of the desktop sees, a take-over in the
// middle of a run, model errors, cancel, and bad input.
func TestAgentRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	models := modeltest.NewServer(t, gatewayKey)
	cfg := agentConfig(t, models)
	cfg.Webhooks.AllowPrivate = true // the receiver of "run.finished reaches a webhook" is on loopback
	a := newAgentEnv(t, cfg, models, newDesktopEnv(t, cfg, 10*time.Minute))

	t.Run("shell over openai, watched", func(t *testing.T) {
		a.useProvider(agentvm.ProviderOpenAI)
		models.Script(
			modeltest.Calls(modeltest.Call("shell", `{"command":"echo written by the agent > /home/user/agent-out.txt && cat /home/user/agent-out.txt"}`)),
			modeltest.Reply("I wrote ", "the file."))
		run := a.start(t, "Write a file in the home directory.")
		watch, err := a.agents.WatchRun(a.auth, &cbv1.WatchRunRequest{RunId: run.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		var steps []*cbv1.AgentStep
		var last *cbv1.AgentRun
		for {
			ev, err := watch.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("watch: %v", err)
			}
			if s := ev.GetStep(); s != nil {
				steps = append(steps, s)
			}
			if r := ev.GetRun(); r != nil {
				last = r
			}
		}
		if last.GetState() != string(cocoonbox.AgentRunSucceeded) || last.GetResult() != "I wrote the file." {
			t.Fatalf("watched run ended %s (%q), result %q", last.GetState(), last.GetError(), last.GetResult())
		}
		if len(steps) != 2 || steps[0].GetNumber() != 1 || steps[0].GetToolCalls()[0].GetName() != "shell" ||
			!strings.Contains(steps[0].GetToolCalls()[0].GetResult(), "written by the agent") || !steps[1].GetDone() {
			t.Fatalf("watched steps: %v", steps)
		}
		if got := a.mustRun(t, "cat /home/user/agent-out.txt"); got != "written by the agent\n" {
			t.Fatalf("file in the box: %q", got)
		}
		// The run's end is one of its box's events, which webhooks hear as run.finished.
		if err := testutil.Poll(a.ctx, testutil.WaitShort, func() error {
			events, err := a.d.Boxes.ListEvents(a.ctx, a.owner.ID, a.id, 0, 200)
			if err != nil {
				return err
			}
			for _, ev := range events {
				if ev.Action == "run.finished" && strings.Contains(string(ev.Detail), last.GetId()) && strings.Contains(string(ev.Detail), "succeeded") {
					return nil
				}
			}
			return fmt.Errorf("no run.finished event for %s", last.GetId())
		}); err != nil {
			t.Fatal(err)
		}
		reqs := models.Requests()
		first := reqs[len(reqs)-2]
		if first.Path != "/v1/chat/completions" || first.Header.Get("Authorization") != "Bearer "+gatewayKey {
			t.Fatalf("the model call: %s with %q", first.Path, first.Header.Get("Authorization"))
		}
	})

	t.Run("usage and budget", func(t *testing.T) {
		testRunUsage(t, a, models)
	})

	t.Run("ask the user", func(t *testing.T) {
		testAskUser(t, a, models)
	})

	t.Run("web app", func(t *testing.T) {
		bin, err := exec.LookPath("chromium")
		if err != nil {
			t.Fatal("chromium is not installed: run make deps")
		}
		a.useProvider(agentvm.ProviderOpenAI)
		// The answer streams slowly, so the panel shows it growing before the step is recorded.
		reply := modeltest.Reply("Done ", "from ", "the ", "web.")
		reply.Pace = 1500 * time.Millisecond
		models.Script(
			modeltest.Calls(modeltest.Call("shell", `{"command":"echo typed in the web app > /home/user/web.txt"}`),
				modeltest.Call("desktop_screenshot", `{}`)),
			reply)
		page := openBrowser(t, a.ctx, bin)
		if err := page.Navigate(a.d.URLs().API + "/"); err != nil {
			t.Fatal(err)
		}
		step(t, "type the token", func() error {
			el, err := page.Element("#token")
			if err != nil {
				return err
			}
			return el.Input(a.token)
		})
		click(t, page, "#signin-form button[type=submit]", "")
		// The boxes page shows what the runs so far used, by model.
		var usage []string
		if err := testutil.Poll(a.ctx, 30*time.Second, func() error {
			if err := evalInto(page, `() => [...document.querySelectorAll('#usage-list tr')].map(tr => tr.textContent)`, &usage); err != nil {
				return err
			}
			if len(usage) == 0 || !strings.HasPrefix(usage[0], "scripted-1") {
				return fmt.Errorf("the usage table shows %q", usage)
			}
			// And the hours the box ran in them.
			var boxes []string
			if err := evalInto(page, `() => [...document.querySelectorAll('#box-usage-list tr')].map(tr => tr.textContent)`, &boxes); err != nil {
				return err
			}
			if len(boxes) == 0 || !strings.HasPrefix(boxes[0], "desk") || strings.HasPrefix(boxes[0], "desk0.00") {
				return fmt.Errorf("the box usage table shows %q", boxes)
			}
			return nil
		}); err != nil {
			saveScreens(t, page)
			t.Fatal(err)
		}
		click(t, page, "#box-list button", "^Open$")
		step(t, "type the task", func() error {
			el, err := page.Element("#agent-task")
			if err != nil {
				return err
			}
			return el.Input("Write a file from the web app.")
		})
		click(t, page, "#agent-run", "")
		// The model's text shows as it streams (WatchRun's text events), before its step is
		// recorded.
		var streamed struct {
			Live  string
			Steps int
		}
		if err := testutil.Poll(a.ctx, time.Minute, func() error {
			if err := evalInto(page, `() => ({
				live: document.querySelector('#agent-live').hidden ? '' : document.querySelector('#agent-live').textContent,
				steps: document.querySelectorAll('#agent-steps > li').length,
			})`, &streamed); err != nil {
				return err
			}
			if !strings.HasPrefix(streamed.Live, "Done from") || streamed.Steps != 1 {
				return fmt.Errorf("the live line shows %q beside %d steps; want the answer's first words beside step 1", streamed.Live, streamed.Steps)
			}
			return nil
		}); err != nil {
			saveScreens(t, page)
			t.Fatal(err)
		}
		// The run's steps show beside the desktop as the workflow records them.
		var shown struct {
			State string
			Steps []string
		}
		if err := testutil.Poll(a.ctx, time.Minute, func() error {
			if err := evalInto(page, `() => ({
				state: document.querySelector('#agent-state').textContent.trim(),
				steps: [...document.querySelectorAll('#agent-steps > li')].map(li => li.textContent),
			})`, &shown); err != nil {
				return err
			}
			// Each step says what its model call used (the scripted gateway reports 10 and 5 tokens).
			if shown.State != string(cocoonbox.AgentRunSucceeded) || len(shown.Steps) != 2 ||
				!strings.Contains(shown.Steps[0], "shell") || !strings.Contains(shown.Steps[1], "Done from the web.") ||
				!strings.Contains(shown.Steps[0], "15 tokens") {
				return fmt.Errorf("the panel shows %+v", shown)
			}
			return nil
		}); err != nil {
			saveScreens(t, page)
			t.Fatal(err)
		}
		// The first step's screenshot shows under it, as the small copy the worker kept.
		var shots []int
		if err := testutil.Poll(a.ctx, 30*time.Second, func() error {
			if err := evalInto(page, `() => [...document.querySelectorAll('#agent-steps > li:first-child img.shot')].map(i => i.naturalWidth)`, &shots); err != nil {
				return err
			}
			if len(shots) != 1 || shots[0] != 320 {
				return fmt.Errorf("the first step shows screenshots %v wide; want one 320 wide", shots)
			}
			return nil
		}); err != nil {
			saveScreens(t, page)
			t.Fatal(err)
		}
		saveScreens(t, page)
		if got := a.mustRun(t, "cat /home/user/web.txt"); got != "typed in the web app\n" {
			t.Fatalf("file in the box: %q", got)
		}
	})

	t.Run("browser over anthropic, seen by a viewer", func(t *testing.T) {
		a.useProvider(agentvm.ProviderAnthropic)
		a.mustRun(t, `cat > /tmp/agent-page.html <<'EOF'
<!doctype html><title>agent test</title>
<button id="go" style="font-size:40px" onclick="document.getElementById('out').textContent='answer '+(6*7)">Press</button>
<p id="out">not pressed</p>
EOF
chmod 644 /tmp/agent-page.html`)
		viewer, err := a.open(a.ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		defer viewer.Close()
		models.Script(
			modeltest.Calls(modeltest.Call("browser_open", `{"url":"file:///tmp/agent-page.html"}`)),
			modeltest.Calls(modeltest.Call("browser_click", `{"selector":"#go"}`)),
			modeltest.Calls(modeltest.Call("browser_read", `{"selector":"#out"}`)),
			modeltest.Reply("The page says answer 42."))
		run := a.start(t, "Press the button on the page and tell me what it says.")
		run = a.waitRun(t, run.GetId(), 3*time.Minute, string(cocoonbox.AgentRunSucceeded), string(cocoonbox.AgentRunFailed))
		if run.GetState() != string(cocoonbox.AgentRunSucceeded) {
			t.Fatalf("run %s: %s", run.GetState(), run.GetError())
		}
		if got := toolResults(run, "browser_read"); len(got) != 1 || !strings.Contains(got[0], "answer 42") {
			t.Fatalf("browser_read gave %q", got)
		}
		// The browser is a window on the desktop a viewer watches, not a headless tab: a mapped,
		// viewable window titled by the page (the agent launched it once XFCE's window manager
		// managed the display). The title follows the page a moment after it loads.
		if err := testutil.Poll(a.ctx, time.Minute, func() error {
			out, err := a.run(`export DISPLAY=:0; w=$(timeout 5 runuser -u user -- xdotool search --name '^agent test - Chromium$' | head -1) &&
timeout 5 runuser -u user -- xwininfo -id "$w" | grep 'Map State'`)
			if err != nil || !strings.Contains(out, "IsViewable") {
				return fmt.Errorf("no viewable window of the page on the box's display: %v %s", err, out)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := viewer.frame(); err != nil {
			t.Fatalf("viewer frame after the run: %v", err)
		}
		last := models.Requests()[len(models.Requests())-1]
		if last.Path != "/v1/messages" || last.Header.Get("X-Api-Key") != gatewayKey {
			t.Fatalf("the model call: %s with key %q", last.Path, last.Header.Get("X-Api-Key"))
		}
	})

	t.Run("take over and hand back", func(t *testing.T) {
		a.useProvider(agentvm.ProviderOpenAI)
		// The person takes over while the first step's shell command runs: the same step's
		// click after it is refused, and the run waits.
		models.Script(
			modeltest.Calls(
				modeltest.Call("shell", `{"command":"touch /tmp/agent-step-1; sleep 3"}`),
				modeltest.Call("desktop_click", `{"x":640,"y":400}`)),
			modeltest.Calls(modeltest.Call("desktop_click", `{"x":640,"y":400}`)),
			modeltest.Reply("Clicked."))
		run := a.start(t, "Click the middle of the screen.")
		if err := testutil.Poll(a.ctx, time.Minute, func() error { _, err := a.run("test -e /tmp/agent-step-1"); return err }); err != nil {
			t.Fatal(err)
		}
		if _, err := a.api.TakeOver(a.auth, &cbv1.TakeOverRequest{Box: string(a.id)}); err != nil {
			t.Fatal(err)
		}
		run = a.waitRun(t, run.GetId(), 2*time.Minute, string(cocoonbox.AgentRunWaiting))
		if len(run.GetSteps()) != 1 || len(run.GetSteps()[0].GetToolCalls()) != 2 ||
			run.GetSteps()[0].GetToolCalls()[1].GetResult() != agentvm.RefusedWhileControlled {
			t.Fatalf("steps while a person drives: %v", run.GetSteps())
		}
		served := len(models.Requests())
		if err := consistently(a.ctx, 2*time.Second, func() error {
			if n := len(models.Requests()); n != served {
				return fmt.Errorf("the model was called %d more times while the run waited", n-served)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.api.HandBack(a.auth, &cbv1.HandBackRequest{Box: string(a.id)}); err != nil {
			t.Fatal(err)
		}
		run = a.waitRun(t, run.GetId(), 2*time.Minute, string(cocoonbox.AgentRunSucceeded))
		if got := toolResults(run, "desktop_click"); len(got) != 2 || got[1] == agentvm.RefusedWhileControlled {
			t.Fatalf("clicks: %q", got)
		}
		// The first model call after the hand-back carried a fresh screenshot of the desktop.
		after := string(models.Requests()[served].Body)
		if !strings.Contains(after, agentvm.HandedBack) || !strings.Contains(after, "data:image/png;base64,") {
			t.Fatalf("the step after hand-back did not look at the desktop first: %.300s", after)
		}
		// This run passes through every state a run has but failure: it is the replay history.
		if v, _ := config.Env()(writeHistoryEnv); v == "1" {
			// The run's row says succeeded before its workflow has unpinned the box and ended.
			if err := a.d.Temporal.GetWorkflow(a.ctx, workflows.AgentRunWorkflowID(run.GetId()), "").Get(a.ctx, nil); err != nil {
				t.Fatal(err)
			}
			writeHistory(a.ctx, t, a.d, workflows.AgentRunWorkflowID(run.GetId()), agentRunHistoryFile)
		}
	})

	t.Run("lease idle releases a waiting run", func(t *testing.T) {
		// A person takes over and never connects: the box releases the lease after its lease
		// idle, and the run waiting for the desktop goes on rather than wait out MaxRunWait.
		a.useProvider(agentvm.ProviderOpenAI)
		v, err := a.d.Boxes.Get(a.ctx, a.owner.ID, a.id)
		if err != nil {
			t.Fatal(err)
		}
		p := v.Policy
		p.LeaseIdle = 15 * time.Second
		if _, err := a.d.Boxes.SetPolicy(a.ctx, a.owner.ID, a.id, p); err != nil {
			t.Fatal(err)
		}
		defer func() {
			p.LeaseIdle = 0
			if _, err := a.d.Boxes.SetPolicy(a.ctx, a.owner.ID, a.id, p); err != nil {
				t.Error(err)
			}
		}()
		models.Script(
			modeltest.Calls(modeltest.Call("desktop_click", `{"x":640,"y":400}`)),
			modeltest.Calls(modeltest.Call("desktop_click", `{"x":640,"y":400}`)),
			modeltest.Reply("Clicked."))
		if _, err := a.api.TakeOver(a.auth, &cbv1.TakeOverRequest{Box: string(a.id)}); err != nil {
			t.Fatal(err)
		}
		run := a.start(t, "Click the middle of the screen.")
		run = a.waitRun(t, run.GetId(), 2*time.Minute, string(cocoonbox.AgentRunSucceeded), string(cocoonbox.AgentRunFailed))
		if run.GetState() != string(cocoonbox.AgentRunSucceeded) {
			t.Fatalf("run %s: %s", run.GetState(), run.GetError())
		}
		if got := toolResults(run, "desktop_click"); len(got) != 2 || got[0] != agentvm.RefusedWhileControlled || got[1] == agentvm.RefusedWhileControlled {
			t.Fatalf("clicks: %q; want the first refused while the lease was held, the second done", got)
		}
		if v, err := a.d.Boxes.Get(a.ctx, a.owner.ID, a.id); err != nil || v.Controller != "" {
			t.Fatalf("controller %q after the run, %v; want the lease released", v.Controller, err)
		}
	})

	t.Run("model errors", func(t *testing.T) {
		a.useProvider(agentvm.ProviderOpenAI)
		models.Script(
			modeltest.Fault(500, "upstream hiccup"), modeltest.Fault(500, "upstream hiccup"),
			modeltest.Reply("Fine after all."))
		run := a.start(t, "Say something.")
		run = a.waitRun(t, run.GetId(), 2*time.Minute, string(cocoonbox.AgentRunSucceeded), string(cocoonbox.AgentRunFailed))
		if run.GetState() != string(cocoonbox.AgentRunSucceeded) || run.GetResult() != "Fine after all." {
			t.Fatalf("after two 500s: %s %q %q", run.GetState(), run.GetError(), run.GetResult())
		}
		models.Script(modeltest.Fault(400, "model scripted-1 does not support tools"))
		run = a.start(t, "Say something else.")
		run = a.waitRun(t, run.GetId(), 2*time.Minute, string(cocoonbox.AgentRunSucceeded), string(cocoonbox.AgentRunFailed))
		if run.GetState() != string(cocoonbox.AgentRunFailed) || !strings.Contains(run.GetError(), "model scripted-1 does not support tools") {
			t.Fatalf("after a 400: %s %q", run.GetState(), run.GetError())
		}
	})

	t.Run("run.finished reaches a webhook", func(t *testing.T) {
		type delivery struct {
			signature string
			body      []byte
		}
		deliveries := make(chan delivery, 64)
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			select {
			case deliveries <- delivery{r.Header.Get(activities.SignatureHeader), body}:
			default:
			}
		}))
		t.Cleanup(rcv.Close)
		hook, err := a.acct.CreateWebhook(a.auth, &cbv1.CreateWebhookRequest{Url: rcv.URL, Events: []string{"run.finished"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = a.acct.DeleteWebhook(a.auth, &cbv1.DeleteWebhookRequest{Id: hook.GetWebhook().GetId()}) })
		a.useProvider(agentvm.ProviderOpenAI)
		models.Script(modeltest.Reply("Heard."))
		run := a.start(t, "Say something to the webhook.")
		run = a.waitRun(t, run.GetId(), 2*time.Minute, string(cocoonbox.AgentRunSucceeded), string(cocoonbox.AgentRunFailed))
		timeout := time.After(testutil.WaitLong)
		for {
			var d delivery
			select {
			case d = <-deliveries:
			case <-timeout:
				t.Fatalf("no run.finished delivery for run %s", run.GetId())
			}
			var p activities.WebhookPayload
			if err := json.Unmarshal(d.body, &p); err != nil || p.Action != "run.finished" || p.BoxID != string(a.id) {
				t.Fatalf("delivery %s: %+v, %v; want run.finished of box %s", d.body, p, err, a.id)
			}
			if !strings.Contains(string(p.Detail), run.GetId()) {
				continue // an earlier run's end
			}
			if !strings.Contains(string(p.Detail), "succeeded") {
				t.Fatalf("run.finished of %s: %s; want it succeeded", run.GetId(), p.Detail)
			}
			ts, _, _ := strings.Cut(strings.TrimPrefix(d.signature, "t="), ",")
			secs, err := strconv.ParseInt(ts, 10, 64)
			if err != nil {
				t.Fatalf("signature header %q: %v", d.signature, err)
			}
			if want := activities.Sign([]byte(hook.GetSecret()), d.body, time.Unix(secs, 0)); d.signature != want {
				t.Fatalf("signature %q, want %q", d.signature, want)
			}
			break
		}
	})

	t.Run("cancel", func(t *testing.T) {
		a.useProvider(agentvm.ProviderOpenAI)
		models.Script(modeltest.Calls(modeltest.Call("shell", `{"command":"sleep 60; echo slept > /tmp/agent-cancelled"}`)))
		asked := len(models.Requests()) + 1
		run := a.start(t, "Take your time.")
		if err := testutil.Poll(a.ctx, time.Minute, func() error {
			_, err := a.run("pgrep -fx 'sleep 60'")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if _, err := a.agents.CancelRun(a.auth, &cbv1.CancelRunRequest{RunId: run.GetId()}); err != nil {
			t.Fatal(err)
		}
		run = a.waitRun(t, run.GetId(), 30*time.Second, string(cocoonbox.AgentRunCancelled))
		t.Logf("cancelled in %v", time.Since(began).Round(time.Millisecond))
		if err := testutil.Poll(a.ctx, 10*time.Second, func() error {
			if _, err := a.run("pgrep -fx 'sleep 60'"); err == nil {
				ps, _ := a.run("ps -eo pid,pgid,ppid,args | cut -c1-120")
				var evs []string
				it := a.d.Temporal.GetWorkflowHistory(a.ctx, workflows.AgentRunWorkflowID(run.GetId()), "", false, 0)
				for it.HasNext() {
					ev, err := it.Next()
					if err != nil {
						break
					}
					evs = append(evs, ev.GetEventType().String()+" "+ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()+ev.GetActivityTaskFailedEventAttributes().GetFailure().GetMessage())
				}
				return fmt.Errorf("the cancelled step's command still runs:\n%s\n%s", ps, strings.Join(evs, "\n"))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if out, _ := a.run("cat /tmp/agent-cancelled 2>/dev/null"); out != "" {
			t.Fatal("the cancelled command finished")
		}
		if n := len(models.Requests()); n != asked {
			t.Fatalf("the model was asked %d more times after the cancel", n-asked)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		a.useProvider(agentvm.ProviderOpenAI)
		before := len(models.Requests())
		a.mustRun(t, "echo intact > /home/user/marker")
		for _, tc := range []struct {
			req  *cbv1.StartRunRequest
			code codes.Code
			want string
		}{
			{&cbv1.StartRunRequest{Box: string(a.id), Task: "x", Model: "gpt-unknown"}, codes.InvalidArgument, "model"},
			{&cbv1.StartRunRequest{Box: string(a.id), Task: "  "}, codes.InvalidArgument, "task"},
			{&cbv1.StartRunRequest{Box: string(a.id), Task: "x", MaxSteps: -1}, codes.InvalidArgument, "max_steps"},
			{&cbv1.StartRunRequest{Box: "bx_0000000000000000", Task: "x"}, codes.NotFound, "not found"},
			{&cbv1.StartRunRequest{Box: "", Task: "x"}, codes.InvalidArgument, "box"},
		} {
			_, err := a.agents.StartRun(a.auth, tc.req)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Errorf("StartRun(%v): %v, want %v naming %q", tc.req, err, tc.code, tc.want)
			}
		}
		// A viewer of the box may watch runs but not start one.
		viewer := a.viewerClient(t)
		if _, err := a.agents.StartRun(viewer, &cbv1.StartRunRequest{Box: string(a.id), Task: "x"}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("a viewer started a run: %v", err)
		}
		// Tool arguments that fail validation are the model's to fix: the run goes on.
		models.Script(
			modeltest.Calls(modeltest.Call("write_file", `{"path":42}`)),
			modeltest.Reply("I give up on that file."))
		run := a.start(t, "Write a file.")
		run = a.waitRun(t, run.GetId(), 2*time.Minute, string(cocoonbox.AgentRunSucceeded), string(cocoonbox.AgentRunFailed))
		calls := run.GetSteps()[0].GetToolCalls()
		if run.GetState() != string(cocoonbox.AgentRunSucceeded) || len(calls) != 1 || !calls[0].GetIsError() ||
			!strings.Contains(calls[0].GetResult(), "write_file") {
			t.Fatalf("bad tool arguments: %s %v", run.GetState(), calls)
		}
		if models.Remaining() != 0 || len(models.Requests()) != before+2 {
			t.Fatalf("model calls: %d requests, %d turns left", len(models.Requests())-before, models.Remaining())
		}
		// The box is untouched by all of it.
		if got := a.mustRun(t, "cat /home/user/marker"); got != "intact\n" {
			t.Fatalf("box file after bad input: %q", got)
		}
	})

	t.Run("computer verbs", func(t *testing.T) {
		testComputerVerbs(t, a, models)
	})

	t.Run("screenshots scaled per provider", func(t *testing.T) {
		testScreenScaling(t, a, models)
	})

	t.Run("recorded run replays", func(t *testing.T) { testRecordedReplay(t, a, models) })
	t.Run("a box that records every run", func(t *testing.T) { testRecordsEveryRun(t, a, models) })
	t.Run("accessibility tree", func(t *testing.T) {
		testAccessibility(t, a, models)
	})
}
