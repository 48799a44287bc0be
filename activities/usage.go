package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox/internal/store"
)

// UsageLedger records what each model call of a run used, and answers what a run and its
// starter have spent against their bounds (internal/store).
type UsageLedger interface {
	RecordModelCall(ctx context.Context, c store.ModelCall) error
	RunSpend(ctx context.Context, id string) (store.Spend, error)
}

// ErrTypeBudget is a run stopped by its token bound before a model call; permanent.
const ErrTypeBudget = "Budget"

// maxQuestion bounds the question of a step the workflow and the run's row carry, in bytes (the
// agent's own bound).
const maxQuestion = 2000

// meter counts one step's model calls: it refuses a call once the run has spent its bound, and
// records each call's usage as the gateway reported it in its answer (the worker holds the key
// and sees the answer; the box's word is never taken for what it used).
type meter struct {
	ledger UsageLedger // nil: nothing is metered or bounded
	texts  RunTexts    // nil: the model's text is not streamed to followers
	call   store.ModelCall

	mu      sync.Mutex
	refusal string // why a call was refused for the budget; "" while none was
	// checked is set by a check that passed with no call made since: the step's first call
	// follows the check at its start by moments, and reads the ledger once.
	checked bool
}

// allow refuses the call about to be made once the run's calls have used its bound, or its
// starter's runs their monthly budget, before the gateway sees it. A ledger that cannot be read
// lets the call through: the bounds are checked again at the next call, and a step is not failed
// for the ledger's outage.
func (m *meter) allow(ctx context.Context) error {
	if m == nil || m.ledger == nil {
		return nil
	}
	m.mu.Lock()
	fresh := m.checked
	m.checked = false
	m.mu.Unlock()
	if fresh {
		return nil
	}
	sp, err := m.ledger.RunSpend(ctx, m.call.RunID)
	var why string
	switch {
	case err != nil:
		return nil
	case sp.RunLimit > 0 && sp.RunUsed >= sp.RunLimit:
		why = fmt.Sprintf("budget: run %s used %d of its %d tokens (max_tokens); the call was not made", m.call.RunID, sp.RunUsed, sp.RunLimit)
	case sp.UserLimit > 0 && sp.UserUsed >= sp.UserLimit:
		why = fmt.Sprintf("budget: the runs of user %s used %d of their %d tokens this month (the monthly budget an admin set); the call was not made",
			m.call.User, sp.UserUsed, sp.UserLimit)
	default:
		return nil
	}
	m.mu.Lock()
	m.refusal = why
	m.mu.Unlock()
	return refuse(http.StatusPaymentRequired, "%s", why)
}

// begin is allow at the start of a step, before anything is asked of the box; when it passes,
// the step's first call takes its word instead of reading the ledger again.
func (m *meter) begin(ctx context.Context) error {
	if err := m.allow(ctx); err != nil {
		return err
	}
	if m != nil {
		m.mu.Lock()
		m.checked = true
		m.mu.Unlock()
	}
	return nil
}

// refused is the budget refusal of a call of the step, or "".
func (m *meter) refused() string {
	if m == nil {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refusal
}

// record writes one call to the ledger: the gateway's status (0 when it was not reached) and
// the usage its answer reported. Best effort: the step goes on when the ledger is down, and the
// failure is logged.
func (m *meter) record(ctx context.Context, status int, u *usageScanner, took time.Duration) error {
	if m == nil || m.ledger == nil {
		return nil
	}
	c := m.call
	c.Status, c.Latency = status, took
	if u != nil {
		u.finish()
		c.InputTokens, c.OutputTokens, c.CachedTokens = u.input, u.output, u.cached
		if u.model != "" && len(u.model) <= 200 {
			c.Model = u.model // a fallback answered, or the gateway names the model more exactly
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return m.ledger.RecordModelCall(ctx, c)
}

// Bounds of what usageScanner keeps of an answer.
const (
	maxUsageLine = 256 << 10 // an event line longer than this carries text, not usage: skipped
	maxUsageBody = 1 << 20   // a JSON answer (not streamed) is read for its usage up to this
)

// usageScanner reads the usage the gateway reports as the answer streams through it: the
// server-sent events of a streamed answer (OpenAI's last chunk carries usage; Anthropic's
// message_start carries the input and message_delta the output so far; OpenAI responses'
// response.completed carries it in its response), or a whole JSON answer.
// It holds at most one event line, or the first maxUsageBody bytes of a JSON answer (of an event
// stream, only what came before its first event line).
type usageScanner struct {
	// onText, when set, is given the model's text as each event carrying some streams past.
	onText func(string)

	line   []byte
	skip   bool // the line under way is longer than maxUsageLine
	body   bytes.Buffer
	events bool // a "data:" line was seen: the answer is an event stream
	done   bool
	input  int64
	output int64
	cached int64
	model  string // the model the answer names, "" when it names none
}

func (u *usageScanner) Write(p []byte) (int, error) {
	n := len(p)
	if !u.events && u.body.Len() < maxUsageBody {
		// Until the answer shows it is an event stream: then only its lines are read.
		u.body.Write(p[:min(len(p), maxUsageBody-u.body.Len())])
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			u.add(p)
			break
		}
		u.add(p[:i])
		u.endLine()
		p = p[i+1:]
	}
	if u.events && u.body.Cap() > 0 {
		u.body = bytes.Buffer{}
	}
	return n, nil
}

func (u *usageScanner) add(p []byte) {
	if u.skip {
		return
	}
	if len(u.line)+len(p) > maxUsageLine {
		u.line, u.skip = u.line[:0], true
		return
	}
	u.line = append(u.line, p...)
}

func (u *usageScanner) endLine() {
	line := bytes.TrimSpace(u.line)
	skipped := u.skip
	u.line, u.skip = u.line[:0], false
	if skipped {
		return
	}
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	u.events = true
	data = bytes.TrimSpace(data)
	if bytes.Contains(data, []byte(`"usage"`)) {
		u.read(data)
	}
	if u.onText != nil && (bytes.Contains(data, []byte(`"content"`)) || bytes.Contains(data, []byte(`"text_delta"`)) ||
		bytes.Contains(data, []byte(`"response.output_text.delta"`))) {
		if t := textDelta(data); t != "" {
			u.onText(t)
		}
	}
}

// finish reads what is left: a last line without its newline, or a JSON answer's usage.
func (u *usageScanner) finish() {
	if u.done {
		return
	}
	u.done = true
	if len(u.line) > 0 || u.skip {
		u.endLine()
	}
	if !u.events && u.body.Len() < maxUsageBody {
		u.read(u.body.Bytes())
	}
}

// tokenUsage is a usage object of either protocol; absent fields stay nil.
type tokenUsage struct {
	PromptTokens        *int64 `json:"prompt_tokens"`
	CompletionTokens    *int64 `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheReadInputTokens     int64  `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64  `json:"cache_creation_input_tokens"`
	// InputTokensDetails is OpenAI responses': its input_tokens include the cached part.
	InputTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

// modelUsage is the model and usage an object of an answer names (Anthropic's message_start
// message, a responses event's response).
type modelUsage struct {
	Model string      `json:"model"`
	Usage *tokenUsage `json:"usage"`
}

// read takes the usage of one event or answer. A later report replaces an earlier one of the
// same count (Anthropic's output so far grows with each message_delta).
func (u *usageScanner) read(doc []byte) {
	var ev struct {
		modelUsage
		Message  *modelUsage `json:"message"`
		Response *modelUsage `json:"response"`
	}
	if json.Unmarshal(doc, &ev) != nil {
		return
	}
	// The model that answered, which a fallback makes another than the run's.
	for _, m := range []*modelUsage{&ev.modelUsage, ev.Message, ev.Response} {
		if m != nil && m.Model != "" {
			u.model = m.Model
		}
	}
	for _, t := range []*tokenUsage{ev.Usage, usageOf(ev.Message), usageOf(ev.Response)} {
		switch {
		case t == nil:
		case t.PromptTokens != nil || t.CompletionTokens != nil: // OpenAI: the prompt includes the cached part
			u.input, u.output, u.cached = deref(t.PromptTokens), deref(t.CompletionTokens), t.PromptTokensDetails.CachedTokens
		case t.InputTokensDetails != nil: // OpenAI responses: so does its input
			u.input, u.output, u.cached = deref(t.InputTokens), deref(t.OutputTokens), max(t.InputTokensDetails.CachedTokens, 0)
		default: // Anthropic: the input excludes what the cache served or took in
			if t.InputTokens != nil {
				u.input = *t.InputTokens + t.CacheReadInputTokens + t.CacheCreationInputTokens
				u.cached = t.CacheReadInputTokens
			}
			if t.OutputTokens != nil {
				u.output = *t.OutputTokens
			}
		}
	}
}

func usageOf(m *modelUsage) *tokenUsage {
	if m == nil {
		return nil
	}
	return m.Usage
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return max(*p, 0)
}

// textDelta is the model text an event carries: an OpenAI chunk's delta content, an Anthropic
// content_block_delta's text_delta, or an OpenAI responses output_text delta.
func textDelta(data []byte) string {
	var ev struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
		Type  string          `json:"type"`
		Delta json.RawMessage `json:"delta"` // an object (anthropic) or a string (responses)
	}
	if json.Unmarshal(data, &ev) != nil {
		return ""
	}
	switch ev.Type {
	case "content_block_delta":
		var d struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(ev.Delta, &d) == nil && d.Type == "text_delta" {
			return d.Text
		}
		return ""
	case "response.output_text.delta":
		var d string
		_ = json.Unmarshal(ev.Delta, &d)
		return d
	}
	var b strings.Builder
	for _, c := range ev.Choices {
		b.WriteString(c.Delta.Content)
	}
	return b.String()
}

// RunTexts publishes the model text of runs' steps as it streams, to the run's followers
// (internal/store's NotifyRunText, which reaches every API server's WatchRun).
type RunTexts interface {
	NotifyRunText(ctx context.Context, t store.RunText) error
}

// textPump publishes one call's streamed text without holding up the relay: pieces that arrive
// while a publish is under way go out together in the next one.
type textPump struct {
	mu      sync.Mutex
	pending strings.Builder
	wake    chan struct{}
	done    chan struct{}
}

// newTextPump starts publishing the text added for run's step to to, with secret (the gateway
// key, which followers must never read, as the box never does) cut out; close flushes and stops
// it.
func newTextPump(ctx context.Context, to RunTexts, run string, step int, secret string, log func(error)) *textPump {
	p := &textPump{wake: make(chan struct{}, 1), done: make(chan struct{})}
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer close(p.done)
		for open := true; open; {
			_, open = <-p.wake
			p.mu.Lock()
			text := p.pending.String()
			p.pending.Reset()
			p.mu.Unlock()
			if secret != "" {
				text = strings.ReplaceAll(text, secret, "[redacted]")
			}
			if text == "" {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := to.NotifyRunText(pctx, store.RunText{Run: run, Step: step, Text: text}); err != nil {
				log(err)
			}
			cancel()
		}
	}()
	return p
}

func (p *textPump) add(text string) {
	p.mu.Lock()
	p.pending.WriteString(text)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default: // a publish is due already; it takes this text too
	}
}

// close publishes what is left and waits for it.
func (p *textPump) close() {
	close(p.wake)
	<-p.done
}
