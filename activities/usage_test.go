package activities

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/internal/store"
)

// TestUsageScanner: the usage a gateway reports is read from its answer in either protocol,
// streamed or whole, however the answer's bytes are cut.
func TestUsageScanner(t *testing.T) {
	gw := modeltest.NewServer(t, "")
	for _, tc := range []struct {
		name, path, body string
	}{
		{"openai streamed", "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
		{"openai whole", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"anthropic streamed", "/v1/messages", `{"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"anthropic whole", "/v1/messages", `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`},
		{"responses streamed", "/v1/responses", `{"model":"m","stream":true,"input":"hi"}`},
		{"responses whole", "/v1/responses", `{"model":"m","input":"hi"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw.Script(modeltest.Turn{Text: []string{"one ", "two ", "three"}, InputTokens: 1234, OutputTokens: 56})
			req, err := http.NewRequest(http.MethodPost, gw.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Anthropic-Version", "2023-06-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("gateway: %d %s, %v", resp.StatusCode, raw, err)
			}
			for _, cut := range []int{1, 7, len(raw)} {
				var u usageScanner
				for b := raw; len(b) > 0; b = b[min(cut, len(b)):] {
					_, _ = u.Write(b[:min(cut, len(b))])
				}
				if u.events && u.body.Len() > 0 {
					t.Fatalf("cut every %d bytes: an event stream's %d bytes kept whole", cut, u.body.Len())
				}
				u.finish()
				if u.input != 1234 || u.output != 56 || u.model != "m" {
					t.Fatalf("cut every %d bytes: %d in, %d out, model %q; want 1234 and 56 of m from %s", cut, u.input, u.output, u.model, raw)
				}
			}
		})
	}
	t.Run("anthropic cache", func(t *testing.T) {
		var u usageScanner
		_, _ = io.WriteString(&u, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":20,\"output_tokens\":1}}}\n\n"+
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n")
		u.finish()
		if u.input != 125 || u.cached != 100 || u.output != 9 {
			t.Fatalf("%d in (%d cached), %d out; want 125 (100), 9", u.input, u.cached, u.output)
		}
	})
	t.Run("a long text line", func(t *testing.T) {
		var u usageScanner
		_, _ = io.WriteString(&u, "data: {\"choices\":[{\"delta\":{\"content\":\""+strings.Repeat("x", maxUsageLine)+"\"}}],\"usage\":{\"prompt_tokens\":99}}\n")
		_, _ = io.WriteString(&u, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n")
		u.finish()
		if u.input != 3 || u.output != 4 || u.cached != 2 {
			t.Fatalf("%d in (%d cached), %d out; want 3 (2), 4: the over-long line is skipped", u.input, u.cached, u.output)
		}
	})
}

// ledger is a UsageLedger in memory, for the link tests (the store's own is TestUsageLedger's).
type ledger struct {
	mu    sync.Mutex
	calls []store.ModelCall
	limit int64
	reads int // RunSpend calls
}

func (l *ledger) RecordModelCall(_ context.Context, c store.ModelCall) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
	return nil
}

func (l *ledger) RunSpend(context.Context, string) (store.Spend, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	s := store.Spend{RunLimit: l.limit}
	for _, c := range l.calls {
		s.RunUsed += c.InputTokens + c.OutputTokens
	}
	return s, nil
}

// TestModelLinkMetering: a call the worker relays is recorded with the usage the gateway
// reported; once the run's calls have used its bound, the next call is refused with 402 naming
// the budget, before the gateway sees it.
func TestModelLinkMetering(t *testing.T) {
	gw := modeltest.NewServer(t, linkModelKey)
	l := &ledger{limit: 12}
	mt := &meter{ledger: l, call: store.ModelCall{RunID: "run_1", Step: 1, BoxID: "bx_0000000000000001", User: "usr_a", Model: "m"}}
	gw.Script(modeltest.Reply("hello"), modeltest.Reply("again"))
	if got := askThroughMeteredLink(t, gw, post("/v1/chat/completions", "", chatBody), mt); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Fatalf("the first call: %s", got)
	}
	l.mu.Lock()
	calls := append([]store.ModelCall(nil), l.calls...)
	l.mu.Unlock()
	if len(calls) != 1 || calls[0].Status != 200 || calls[0].InputTokens != 10 || calls[0].OutputTokens != 5 ||
		calls[0].RunID != "run_1" || calls[0].User != "usr_a" || calls[0].Model != "m" || calls[0].Latency <= 0 {
		t.Fatalf("recorded %+v; want one call of 10 and 5 tokens", calls)
	}
	if mt.refused() != "" {
		t.Fatalf("refused after the first call: %s", mt.refused())
	}
	got := askThroughMeteredLink(t, gw, post("/v1/chat/completions", "", chatBody), mt)
	if !strings.HasPrefix(got, "HTTP/1.1 402") || !strings.Contains(got, "budget: run run_1 used 15 of its 12 tokens") {
		t.Fatalf("the call over the bound: %s", got)
	}
	if n := len(gw.Requests()); n != 1 {
		t.Fatalf("the gateway saw %d calls; want the first alone", n)
	}
	if !strings.HasPrefix(mt.refused(), "budget: ") {
		t.Fatalf("the step's refusal: %q", mt.refused())
	}
}

// TestMeterReadsOnce: the check at a step's start stands for its first call, moments later: the
// ledger is read once for both, and again for every call after.
func TestMeterReadsOnce(t *testing.T) {
	gw := modeltest.NewServer(t, linkModelKey)
	l := &ledger{limit: 1000}
	mt := &meter{ledger: l, call: store.ModelCall{RunID: "run_1", Step: 1, BoxID: "bx_0000000000000001", User: "usr_a", Model: "m"}}
	if err := mt.begin(t.Context()); err != nil {
		t.Fatal(err)
	}
	gw.Script(modeltest.Reply("hello"), modeltest.Reply("again"))
	for i, want := range []int{1, 2} {
		if got := askThroughMeteredLink(t, gw, post("/v1/chat/completions", "", chatBody), mt); !strings.HasPrefix(got, "HTTP/1.1 200") {
			t.Fatalf("call %d: %s", i+1, got)
		}
		l.mu.Lock()
		reads := l.reads
		l.mu.Unlock()
		if reads != want {
			t.Fatalf("after call %d the ledger was read %d times; want %d", i+1, reads, want)
		}
	}
}

// texts is a RunTexts in memory.
type texts struct {
	mu  sync.Mutex
	got []store.RunText
}

func (x *texts) NotifyRunText(_ context.Context, t store.RunText) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.got = append(x.got, t)
	return nil
}

// TestModelLinkStreamsText: the model's text streams to the run's followers as the gateway sends
// it, in either protocol, whole and in order, named by run and step; a tool call's arguments are
// not text.
func TestModelLinkStreamsText(t *testing.T) {
	for _, tc := range []struct{ path, headers, body string }{
		{"/v1/chat/completions", "", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/messages", "Anthropic-Version: 2023-06-01\r\n", `{"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/responses", "", `{"model":"m","stream":true,"input":"hi"}`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			gw := modeltest.NewServer(t, linkModelKey)
			x := &texts{}
			mt := &meter{texts: x, call: store.ModelCall{RunID: "run_1", Step: 3}}
			gw.Script(modeltest.Turn{Text: []string{"One, ", "two, ", "three."}, ToolCalls: []modeltest.ToolCall{{Name: "shell", Arguments: `{"command":"ls"}`}}})
			provider := map[string]string{"/v1/chat/completions": ProviderOpenAI, "/v1/messages": ProviderAnthropic, "/v1/responses": ProviderOpenAIResponses}[tc.path]
			if got := askThroughProvider(t, gw, provider, post(tc.path, tc.headers, tc.body), mt); !strings.HasPrefix(got, "HTTP/1.1 200") {
				t.Fatalf("the call: %s", got)
			}
			x.mu.Lock()
			defer x.mu.Unlock()
			var all strings.Builder
			for _, p := range x.got {
				if p.Run != "run_1" || p.Step != 3 {
					t.Fatalf("a piece of another run or step: %+v", p)
				}
				all.WriteString(p.Text)
			}
			if all.String() != "One, two, three." {
				t.Fatalf("streamed %q in %d pieces; want \"One, two, three.\"", all.String(), len(x.got))
			}
		})
	}
}

// TestTextPumpCutsTheKey: the gateway key never reaches a run's followers in its streamed text.
func TestTextPumpCutsTheKey(t *testing.T) {
	x := &texts{}
	p := newTextPump(context.Background(), x, "run_1", 1, "sk-secret-123", func(err error) { t.Error(err) })
	p.add("your key is sk-secret-123, said the gateway")
	p.close()
	x.mu.Lock()
	defer x.mu.Unlock()
	var all strings.Builder
	for _, piece := range x.got {
		all.WriteString(piece.Text)
	}
	if strings.Contains(all.String(), "sk-secret-123") || !strings.Contains(all.String(), "[redacted]") {
		t.Fatalf("streamed %q", all.String())
	}
}
