package agentvm_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/model"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/agentvm/tools"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// testKey is the scripted gateway's key: none, since the agent holds no key (the control plane
// adds it on the way out of the box) and sends none.
const testKey = ""

// providers runs a test against both wire protocols.
var providers = []string{agentvm.ProviderOpenAI, agentvm.ProviderAnthropic}

func baseURL(srv *modeltest.Server, provider string) string {
	if provider == agentvm.ProviderOpenAI {
		return srv.OpenAIBaseURL()
	}
	return srv.AnthropicBaseURL()
}

func stepRequest(srv *modeltest.Server, provider string, step int32, messages []byte) *agentvmv1.StepRequest {
	return &agentvmv1.StepRequest{
		RunId: "run-1", Step: step, Provider: provider, BaseUrl: baseURL(srv, provider),
		Model: "test-model", System: "You drive a box.",
		Task: "Write hello to out.txt", Messages: messages, MaxTokens: 1024,
	}
}

// counted wraps a tool and counts its calls.
type counted struct {
	tools.Tool
	n *atomic.Int32
}

func (c counted) Call(ctx context.Context, args json.RawMessage) (tools.Result, error) {
	c.n.Add(1)
	return c.Tool.Call(ctx, args)
}

func newLoop(dir string, n *atomic.Int32) *agentvm.Loop {
	var ts []tools.Tool
	for _, t := range append([]tools.Tool{tools.Shell{Dir: dir}}, tools.Files(dir)...) {
		ts = append(ts, counted{t, n})
	}
	return &agentvm.Loop{Tools: ts, ModelOptions: []model.Option{model.WithRetry(model.Retry{Attempts: 1})}}
}

func TestStepRunsToolsThenFinishes(t *testing.T) {
	for _, provider := range providers {
		t.Run(provider, func(t *testing.T) {
			dir := t.TempDir()
			srv := modeltest.NewServer(t, testKey,
				modeltest.Calls(modeltest.Call("write_file", `{"path":"out.txt","content":"hello\n"}`)),
				modeltest.Reply("Wrote ", "it."))
			var n atomic.Int32
			loop := newLoop(dir, &n)

			resp, err := loop.Step(t.Context(), stepRequest(srv, provider, 1, nil))
			require.NoError(t, err)
			require.False(t, resp.Done)
			require.Len(t, resp.ToolCalls, 1)
			tc := resp.ToolCalls[0]
			require.Equal(t, "write_file", tc.Name)
			require.False(t, tc.IsError, tc.Result)
			require.Contains(t, tc.Result, "wrote 6 bytes")
			got, err := os.ReadFile(filepath.Join(dir, "out.txt"))
			require.NoError(t, err)
			require.Equal(t, "hello\n", string(got))

			// The first request carried the system prompt, the task and the tools, and no key.
			h := srv.Requests()[0].Header
			require.Empty(t, h.Get("Authorization"))
			require.Empty(t, h.Get("X-Api-Key"))
			first := string(srv.Requests()[0].Body)
			for _, want := range []string{"You drive a box.", "Write hello to out.txt", `"write_file"`, `"shell"`, `"list_dir"`} {
				require.Contains(t, first, want)
			}

			resp, err = loop.Step(t.Context(), stepRequest(srv, provider, 2, resp.Messages))
			require.NoError(t, err)
			require.True(t, resp.Done)
			require.Equal(t, "Wrote it.", resp.Text)
			require.Empty(t, resp.ToolCalls)
			require.EqualValues(t, 1, n.Load())

			// The second request fed the tool result back.
			require.Contains(t, string(srv.Requests()[1].Body), "wrote 6 bytes to "+filepath.Join(dir, "out.txt"))
			var conv []map[string]any
			require.NoError(t, json.Unmarshal(resp.Messages, &conv))
			roles := []string{}
			for _, m := range conv {
				roles = append(roles, m["role"].(string))
			}
			require.Equal(t, []string{"user", "assistant", "tool", "assistant"}, roles)
			require.Equal(t, "Wrote it.", conv[3]["text"])
		})
	}
}

func TestStepFeedsBadCallsBackAsErrors(t *testing.T) {
	for _, provider := range providers {
		t.Run(provider, func(t *testing.T) {
			srv := modeltest.NewServer(t, testKey,
				modeltest.Calls(
					modeltest.Call("write_file", `{"path":"x.txt"}`),
					modeltest.Call("teleport", `{}`),
				),
				modeltest.Reply("Sorry."))
			var n atomic.Int32
			loop := newLoop(t.TempDir(), &n)

			resp, err := loop.Step(t.Context(), stepRequest(srv, provider, 1, nil))
			require.NoError(t, err)
			require.Len(t, resp.ToolCalls, 2)
			require.True(t, resp.ToolCalls[0].IsError)
			require.Contains(t, resp.ToolCalls[0].Result, "content is required")
			require.True(t, resp.ToolCalls[1].IsError)
			require.Contains(t, resp.ToolCalls[1].Result, `unknown tool "teleport"`)

			resp, err = loop.Step(t.Context(), stepRequest(srv, provider, 2, resp.Messages))
			require.NoError(t, err)
			require.True(t, resp.Done)
			body := string(srv.Requests()[1].Body)
			require.Contains(t, body, "content is required")
			require.Contains(t, body, `unknown tool \"teleport\"`)
		})
	}
}

func TestStepMapsModelErrors(t *testing.T) {
	for _, provider := range providers {
		t.Run(provider, func(t *testing.T) {
			srv := modeltest.NewServer(t, testKey,
				modeltest.Fault(400, "no such model: test-model"),
				modeltest.Fault(503, "overloaded"))
			var n atomic.Int32
			loop := newLoop(t.TempDir(), &n)

			_, err := loop.Step(t.Context(), stepRequest(srv, provider, 1, nil))
			require.Equal(t, codes.InvalidArgument, status.Code(err), err)
			require.Contains(t, status.Convert(err).Message(), "no such model: test-model")

			_, err = loop.Step(t.Context(), stepRequest(srv, provider, 1, nil))
			require.Equal(t, codes.Unavailable, status.Code(err), err)
			require.Contains(t, status.Convert(err).Message(), "overloaded")
		})
	}
}

func TestStepRejectsBadRequests(t *testing.T) {
	srv := modeltest.NewServer(t, testKey)
	loop := newLoop(t.TempDir(), new(atomic.Int32))
	for name, mutate := range map[string]func(*agentvmv1.StepRequest){
		"provider": func(r *agentvmv1.StepRequest) { r.Provider = "gemini" },
		"model":    func(r *agentvmv1.StepRequest) { r.Model = "" },
		"task":     func(r *agentvmv1.StepRequest) { r.Task = "" },
		"messages": func(r *agentvmv1.StepRequest) { r.Messages = []byte("{") },
	} {
		req := stepRequest(srv, agentvm.ProviderOpenAI, 1, nil)
		mutate(req)
		_, err := loop.Step(t.Context(), req)
		require.Equal(t, codes.InvalidArgument, status.Code(err), name)
		require.True(t, strings.Contains(err.Error(), name), err.Error())
	}
}

// fakeClick stands in for the desktop tool, counting calls.
type fakeClick struct{ n *atomic.Int32 }

func (fakeClick) Name() string            { return "desktop_click" }
func (fakeClick) Description() string     { return "click" }
func (fakeClick) Schema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (f fakeClick) Call(context.Context, json.RawMessage) (tools.Result, error) {
	f.n.Add(1)
	return tools.Result{Text: "clicked"}, nil
}

// fakePNG is what fakeScreenshot shows.
var fakePNG = []byte("\x89PNG\r\n\x1a\nfake")

// fakeScreenshot stands in for the desktop's screenshot tool.
type fakeScreenshot struct{}

func (fakeScreenshot) Name() string            { return "desktop_screenshot" }
func (fakeScreenshot) Description() string     { return "screenshot" }
func (fakeScreenshot) Schema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (fakeScreenshot) Call(context.Context, json.RawMessage) (tools.Result, error) {
	return tools.Result{Text: "the desktop", Images: [][]byte{fakePNG}}, nil
}

// TestStepRefusesDesktopInputWhileControlled: while a person holds the control lease, the
// model's desktop actions are answered with a refusal and never reach the desktop; other tools
// still run.
func TestStepRefusesDesktopInputWhileControlled(t *testing.T) {
	for _, provider := range providers {
		t.Run(provider, func(t *testing.T) {
			srv := modeltest.NewServer(t, testKey,
				modeltest.Calls(
					modeltest.Call("desktop_click", `{"x":1,"y":1}`),
					modeltest.Call("shell", `{"command":"true"}`),
				),
				modeltest.Calls(modeltest.Call("desktop_click", `{"x":1,"y":1}`)))
			var n, clicks atomic.Int32
			loop := newLoop(t.TempDir(), &n)
			loop.Tools = append(loop.Tools, fakeClick{&clicks})

			req := stepRequest(srv, provider, 1, nil)
			req.DesktopInputRefused = true
			resp, err := loop.Step(t.Context(), req)
			require.NoError(t, err)
			require.Len(t, resp.ToolCalls, 2)
			require.True(t, resp.ToolCalls[0].IsError)
			require.Equal(t, agentvm.RefusedWhileControlled, resp.ToolCalls[0].Result)
			require.False(t, resp.ToolCalls[1].IsError, "the shell still runs")
			require.Zero(t, clicks.Load(), "the click never reached the desktop")
			require.True(t, resp.DesktopRefused, "the run learns it must wait")

			// After hand-back the model first sees the desktop as the person left it, then the
			// same action goes through.
			loop.Tools = append(loop.Tools, fakeScreenshot{})
			req = stepRequest(srv, provider, 2, resp.Messages)
			req.FreshScreenshot = true
			resp, err = loop.Step(t.Context(), req)
			require.NoError(t, err)
			require.Equal(t, "clicked", resp.ToolCalls[0].Result)
			require.EqualValues(t, 1, clicks.Load())
			require.False(t, resp.DesktopRefused)
			sent := string(srv.Requests()[1].Body)
			require.Contains(t, sent, agentvm.HandedBack)
			require.Contains(t, sent, base64.StdEncoding.EncodeToString(fakePNG), "the screenshot went to the model")
		})
	}
}

// leaseTaker stands in for a tool during which a person takes over the desktop.
type leaseTaker struct{ loop *agentvm.Loop }

func (leaseTaker) Name() string            { return "wait_a_bit" }
func (leaseTaker) Description() string     { return "wait" }
func (leaseTaker) Schema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (l leaseTaker) Call(context.Context, json.RawMessage) (tools.Result, error) {
	l.loop.SetDesktopHeld(true, 1) // what Agents.SetDesktopLease does when a person takes over
	return tools.Result{Text: "waited"}, nil
}

// TestStepRefusesDesktopInputAfterATakeOverMidStep: a person taking over while a step runs stops
// that step's later desktop actions, not only the next step's.
func TestStepRefusesDesktopInputAfterATakeOverMidStep(t *testing.T) {
	srv := modeltest.NewServer(t, testKey, modeltest.Calls(
		modeltest.Call("desktop_click", `{"x":1,"y":1}`),
		modeltest.Call("wait_a_bit", `{}`),
		modeltest.Call("desktop_click", `{"x":1,"y":1}`),
	))
	var n, clicks atomic.Int32
	loop := newLoop(t.TempDir(), &n)
	loop.Tools = append(loop.Tools, fakeClick{&clicks}, leaseTaker{loop})
	resp, err := loop.Step(t.Context(), stepRequest(srv, agentvm.ProviderOpenAI, 1, nil))
	require.NoError(t, err)
	require.Equal(t, "clicked", resp.ToolCalls[0].Result, "before the take-over")
	require.Equal(t, agentvm.RefusedWhileControlled, resp.ToolCalls[2].Result, "after it")
	require.EqualValues(t, 1, clicks.Load())
	require.True(t, resp.DesktopRefused)
}

// TestStepDoesNotUndoANewerLease: a step whose request was computed before a take-over the agent
// already heard of (a lower lease sequence) is refused the desktop all the same; a later one
// after the hand-back acts again.
func TestStepDoesNotUndoANewerLease(t *testing.T) {
	srv := modeltest.NewServer(t, testKey,
		modeltest.Calls(modeltest.Call("desktop_click", `{"x":1,"y":1}`)),
		modeltest.Calls(modeltest.Call("desktop_click", `{"x":1,"y":1}`)))
	var n, clicks atomic.Int32
	loop := newLoop(t.TempDir(), &n)
	loop.Tools = append(loop.Tools, fakeClick{&clicks})
	loop.SetDesktopHeld(true, 5) // the take-over, told while the next step was being prepared

	req := stepRequest(srv, agentvm.ProviderOpenAI, 1, nil)
	req.LeaseSeq = 4 // computed before it: nobody held the desktop then
	resp, err := loop.Step(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, agentvm.RefusedWhileControlled, resp.ToolCalls[0].Result)
	require.True(t, resp.DesktopRefused)
	require.Zero(t, clicks.Load())

	req = stepRequest(srv, agentvm.ProviderOpenAI, 2, resp.GetMessages())
	req.LeaseSeq = 6 // after the hand-back
	resp, err = loop.Step(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, "clicked", resp.ToolCalls[0].Result)
	require.EqualValues(t, 1, clicks.Load())
}

// TestStepKeepsTheNewestImages: a run that takes a screenshot every step sends the model, and
// keeps in its conversation, only the newest DefaultKeepImages of them; each older one leaves a
// line saying it was there. Without this a step's cost grows with every screenshot before it.
func TestStepKeepsTheNewestImages(t *testing.T) {
	const steps = 5
	turns := make([]modeltest.Turn, 0, steps+1)
	for range steps {
		turns = append(turns, modeltest.Calls(modeltest.Call("desktop_screenshot", `{}`)))
	}
	srv := modeltest.NewServer(t, testKey, append(turns, modeltest.Reply("done"))...)
	var n atomic.Int32
	loop := newLoop(t.TempDir(), &n)
	// Each step's screenshot differs, so which ones were kept can be told apart.
	shot := 0
	loop.Tools = append(loop.Tools, screenshotN{&shot})
	var conv []byte
	for step := int32(1); step <= steps+1; step++ {
		resp, err := loop.Step(t.Context(), stepRequest(srv, agentvm.ProviderOpenAI, step, conv))
		require.NoError(t, err)
		conv = resp.Messages
	}
	last := string(srv.Requests()[steps].Body)
	for i := 1; i <= steps; i++ {
		img := base64.StdEncoding.EncodeToString(screenshotPNG(i))
		if i > steps-agentvm.DefaultKeepImages {
			require.Contains(t, last, img, "screenshot %d is among the newest", i)
		} else {
			require.NotContains(t, last, img, "screenshot %d is older than the newest %d", i, agentvm.DefaultKeepImages)
		}
	}
	require.Equal(t, steps-agentvm.DefaultKeepImages, strings.Count(last, agentvm.OmittedImage))
	require.NotContains(t, string(conv), base64.StdEncoding.EncodeToString(screenshotPNG(1)), "the kept conversation drops it too")
}

// screenshotN is a screenshot tool whose n-th image is screenshotPNG(n).
type screenshotN struct{ n *int }

func (screenshotN) Name() string            { return "desktop_screenshot" }
func (screenshotN) Description() string     { return "screenshot" }
func (screenshotN) Schema() json.RawMessage { return json.RawMessage(`{"type":"object"}`) }
func (s screenshotN) Call(context.Context, json.RawMessage) (tools.Result, error) {
	*s.n++
	return tools.Result{Text: "the desktop", Images: [][]byte{screenshotPNG(*s.n)}}, nil
}

func screenshotPNG(n int) []byte { return append(append([]byte(nil), fakePNG...), byte('0'+n)) }
