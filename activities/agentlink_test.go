package activities

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/model"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/agentvm/tools"
	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

const linkModelKey = "sk-link-model-key"

func TestAgentLinkMatchesTheAgent(t *testing.T) {
	if ProviderOpenAI != agentvm.ProviderOpenAI || ProviderAnthropic != agentvm.ProviderAnthropic {
		t.Fatalf("activities names the providers %s and %s, the agent %s and %s", ProviderOpenAI, ProviderAnthropic, agentvm.ProviderOpenAI, agentvm.ProviderAnthropic)
	}
}

func TestGatewayRoute(t *testing.T) {
	for _, tc := range []struct {
		g                     Gateway
		boxBase, path, target string
	}{
		{Gateway{Provider: ProviderOpenAI, BaseURL: "https://api.openai.com/v1"},
			"http://" + boxGatewayHost + "/v1", "/v1/chat/completions", "https://api.openai.com/v1/chat/completions"},
		{Gateway{Provider: ProviderAnthropic, BaseURL: "https://api.anthropic.com"},
			"http://" + boxGatewayHost, "/v1/messages", "https://api.anthropic.com/v1/messages"},
		{Gateway{Provider: ProviderAnthropic, BaseURL: "http://127.0.0.1:8080/anthropic/"},
			"http://" + boxGatewayHost + "/anthropic", "/anthropic/v1/messages", "http://127.0.0.1:8080/anthropic/v1/messages"},
	} {
		r, err := tc.g.route("k")
		if err != nil || r.boxBase != tc.boxBase || r.path != tc.path || r.target != tc.target {
			t.Errorf("route(%+v) = %+v, %v; want %s %s %s", tc.g, r, err, tc.boxBase, tc.path, tc.target)
		}
	}
	for _, base := range []string{"", "ftp://gw/v1", "https:///v1", "gw:443", "http://%zz", "https://gw/v1?k=1", "https://u:p@gw/v1"} {
		if r, err := (Gateway{Provider: ProviderOpenAI, BaseURL: base}).route("k"); err == nil || !strings.Contains(err.Error(), "base_url") {
			t.Errorf("route(%q) = %+v, %v; want an error naming base_url", base, r, err)
		}
	}
	if _, err := (Gateway{}).route(""); err == nil || !strings.Contains(err.Error(), "no model gateway is set on this worker") {
		t.Errorf("route of a worker without a gateway: %v; want it said so", err)
	}
	if _, err := (Gateway{Provider: "gemini", BaseURL: "https://gw/v1"}).route("k"); err == nil || !strings.Contains(err.Error(), "provider") {
		t.Errorf("route of provider gemini: %v; want an error naming the provider", err)
	}
}

// noNetwork is the model client of the agent in a box: using it fails the test.
type noNetwork struct{ t *testing.T }

func (n noNetwork) RoundTrip(r *http.Request) (*http.Response, error) {
	n.t.Errorf("model call to %s went around the links", r.URL)
	return nil, errors.New("the box has no network")
}

// linkBox is a sandbox engine whose one sandbox is a real agent on loopback listeners, reached
// by port as through the ports relay. It counts the connections still open.
type linkBox struct {
	sandbox.Client
	ports map[int]string // box port → loopback address

	mu    sync.Mutex
	open  map[int]int // box port → connections not yet closed
	dials map[int]int
	sent  map[int]*bytes.Buffer // box port → every byte the control plane sent to it
	// held, while not nil, holds every new dial of a link until it is closed (or the dial's
	// context ends).
	held chan struct{}
}

// trackedConn is a relay connection that tells its box when it closes, and what it wrote.
type trackedConn struct {
	*net.TCPConn
	once    sync.Once
	onClose func()
	onWrite func([]byte)
}

func (c *trackedConn) Write(p []byte) (int, error) {
	if c.onWrite != nil {
		c.onWrite(p)
	}
	return c.TCPConn.Write(p)
}

// ReadFrom hides TCPConn's, which would bypass Write.
func (c *trackedConn) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(struct{ io.Writer }{c}, r)
}

func (c *trackedConn) Close() error {
	c.once.Do(c.onClose)
	return c.TCPConn.Close()
}

func (b *linkBox) DialPort(ctx context.Context, sb sandbox.SandboxRef, port int) (sandbox.Conn, error) {
	addr, ok := b.ports[port]
	if sb.ID != "sb_1" || sb.Token != "tok" || !ok {
		return nil, sandbox.ErrNotFound
	}
	b.mu.Lock()
	held := b.held
	b.mu.Unlock()
	if held != nil && port == wire.LinkPort {
		select {
		case <-held:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, sandbox.ErrUnavailable
	}
	b.mu.Lock()
	b.open[port]++
	b.dials[port]++
	b.mu.Unlock()
	return &trackedConn{TCPConn: c.(*net.TCPConn), onClose: func() {
		b.mu.Lock()
		b.open[port]--
		b.mu.Unlock()
	}, onWrite: func(p []byte) {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.sent == nil {
			b.sent = map[int]*bytes.Buffer{}
		}
		if b.sent[port] == nil {
			b.sent[port] = &bytes.Buffer{}
		}
		b.sent[port].Write(p)
	}}, nil
}

// sentTo returns every byte sent to the box's port so far.
func (b *linkBox) sentTo(port int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sent[port] == nil {
		return nil
	}
	return bytes.Clone(b.sent[port].Bytes())
}

func (b *linkBox) Exec(context.Context, sandbox.SandboxRef, sandbox.ExecRequest) (sandbox.ExecResult, error) {
	return sandbox.ExecResult{}, nil // the agent below was given its credential directly
}

func (b *linkBox) counts(port int) (open, dials int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open[port], b.dials[port]
}

// gatewayDials records the gateway dials and counts the gateway connections still open.
type gatewayDials struct {
	fail error

	mu    sync.Mutex
	addrs []string
	open  int
	peak  int // most connections open at once
}

func (g *gatewayDials) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	g.mu.Lock()
	g.addrs = append(g.addrs, addr)
	g.mu.Unlock()
	if g.fail != nil {
		return nil, g.fail
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.open++
	g.peak = max(g.peak, g.open)
	g.mu.Unlock()
	return &trackedConn{TCPConn: c.(*net.TCPConn), onClose: func() {
		g.mu.Lock()
		g.open--
		g.mu.Unlock()
	}}, nil
}

type linkFixture struct {
	a       *Agent
	box     *linkBox
	gw      *gatewayDials
	runs    *fakeRuns
	dir     string
	gateway Gateway // what a.Gateway returns
}

// newLinkFixture runs a real agent whose model calls can only go over model links.
func newLinkFixture(t *testing.T) *linkFixture {
	t.Helper()
	dir := t.TempDir()
	cred := boxlink.Credential([]byte("key"), agentBox)
	links := agentvm.NewLinks()
	links.Wait = 5 * time.Second
	links.Orphan = time.Hour // only the control plane's end of a step closes idle links
	loop := &agentvm.Loop{
		Tools:        append([]tools.Tool{tools.Shell{Dir: dir}}, tools.Files(dir)...),
		HTTPClient:   &http.Client{Transport: noNetwork{t}},
		Links:        links,
		ModelOptions: []model.Option{model.WithRetry(model.Retry{Attempts: 1})},
	}
	journal, err := agentvm.OpenJournal(filepath.Join(dir, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := agentvm.NewServer(agentvm.Config{Credential: cred, Loop: loop, Journal: journal})
	if err != nil {
		t.Fatal(err)
	}
	grpcLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	linkLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(grpcLis) }()
	go func() { _ = srv.ServeLinks(linkLis) }()
	t.Cleanup(srv.Stop)

	box := &linkBox{
		ports: map[int]string{wire.AgentPort: grpcLis.Addr().String(), wire.LinkPort: linkLis.Addr().String()},
		open:  map[int]int{}, dials: map[int]int{},
	}
	gw := &gatewayDials{}
	runs := &fakeRuns{steps: map[int]store.NewAgentStep{}}
	a := &Agent{
		Link: &boxlink.Link{Sandbox: box, Tokens: fakeTokens{}, Credentials: testCreds}, Runs: runs, Vault: fakeVault{"usr_a/MODEL_KEY": linkModelKey},
		DialGateway: gw.dial,
	}
	f := &linkFixture{a: a, box: box, gw: gw, runs: runs, dir: dir}
	a.Gateway = func() Gateway { return f.gateway }
	return f
}

// useGateway points the fixture's worker at srv's endpoint for provider, with the key in
// usr_a's MODEL_KEY secret.
func (f *linkFixture) useGateway(srv *modeltest.Server, provider string) {
	f.gateway = Gateway{Provider: provider, BaseURL: srv.OpenAIBaseURL(), KeySecret: "MODEL_KEY"}
	if provider == ProviderAnthropic {
		f.gateway.BaseURL = srv.AnthropicBaseURL()
	}
}

// step runs a step and fails the test when it does not end soon: a step waiting on its links'
// goroutines would hang.
func (f *linkFixture) step(t *testing.T, in StepInput) (StepResult, error) {
	t.Helper()
	type result struct {
		res StepResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := f.a.Step(t.Context(), in)
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		return r.res, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("the step did not end")
		return StepResult{}, nil
	}
}

// assertLinksClosed checks that a step left no link or gateway connection open.
func (f *linkFixture) assertLinksClosed(t *testing.T) {
	t.Helper()
	if open, dials := f.box.counts(wire.LinkPort); open != 0 || dials == 0 {
		t.Errorf("%d of %d links still open after the step", open, dials)
	}
	f.gw.mu.Lock()
	defer f.gw.mu.Unlock()
	if f.gw.open != 0 {
		t.Errorf("%d gateway connections still open after the step", f.gw.open)
	}
}

func TestAgentStepOverModelLinks(t *testing.T) {
	for _, provider := range []string{agentvm.ProviderOpenAI, agentvm.ProviderAnthropic} {
		t.Run(provider, func(t *testing.T) {
			f := newLinkFixture(t)
			srv := modeltest.NewServer(t, linkModelKey,
				modeltest.Calls(modeltest.Call("write_file", `{"path":"out.txt","content":"hello\n"}`)),
				modeltest.Reply("Wrote ", "it."))
			f.useGateway(srv, provider)
			in := StepInput{RunID: "run_1", BoxID: agentBox, Owner: "usr_a", Step: 1, Model: "m", Task: "write hello to out.txt"}

			res, err := f.step(t, in)
			if err != nil {
				t.Fatal(err)
			}
			if res.Done || res.ToolCalls != 1 {
				t.Fatalf("step 1 = %+v", res)
			}
			if got, err := os.ReadFile(filepath.Join(f.dir, "out.txt")); err != nil || string(got) != "hello\n" {
				t.Fatalf("out.txt = %q, %v", got, err)
			}
			// Step 2's links were opened as step 1 ended, and its model call needs no dial.
			testutil.Eventually(t, testutil.WaitShort, "the next step's links open", func() bool {
				open, _ := f.box.counts(wire.LinkPort)
				return open == idleLinks
			})
			held := make(chan struct{})
			f.box.mu.Lock()
			f.box.held = held
			f.box.mu.Unlock()
			in.Step = 2
			res, err = f.step(t, in)
			close(held)
			if err != nil || !res.Done || res.Text != "Wrote it." {
				t.Fatalf("step 2 with no new link dialed = %+v, %v", res, err)
			}
			f.assertLinksClosed(t)
			if n := len(srv.Requests()); n != 2 {
				t.Errorf("the model server saw %d requests, want 2", n)
			}
			u, _ := url.Parse(srv.URL)
			for _, addr := range f.gw.addrs {
				if addr != u.Host {
					t.Errorf("dialed %s, want only the gateway %s", addr, u.Host)
				}
			}
			if !strings.Contains(string(srv.Requests()[1].Body), "wrote 6 bytes") {
				t.Errorf("step 2 did not feed back the tool result: %s", srv.Requests()[1].Body)
			}
		})
	}
}

// TestAgentStepKeepsTheModelKeyOutOfTheBox: whatever a box runs, it never sees the user's model
// key: no byte the control plane sends to the agent's ports carries it, while the gateway gets
// it on every call.
func TestAgentStepKeepsTheModelKeyOutOfTheBox(t *testing.T) {
	for _, provider := range []string{agentvm.ProviderOpenAI, agentvm.ProviderAnthropic} {
		t.Run(provider, func(t *testing.T) {
			f := newLinkFixture(t)
			srv := modeltest.NewServer(t, linkModelKey,
				modeltest.Calls(modeltest.Call("write_file", `{"path":"out.txt","content":"hello\n"}`)),
				modeltest.Reply("Wrote ", "it."))
			f.useGateway(srv, provider)
			in := StepInput{RunID: "run_1", BoxID: agentBox, Owner: "usr_a", Step: 1, Model: "m", Task: "write hello to out.txt"}
			for step := 1; step <= 2; step++ {
				in.Step = step
				if _, err := f.step(t, in); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
			if n := len(srv.Requests()); n != 2 {
				t.Fatalf("the gateway saw %d requests, want 2", n)
			}
			for _, port := range []int{wire.AgentPort, wire.LinkPort} {
				sent := f.box.sentTo(port)
				if len(sent) == 0 {
					t.Errorf("nothing was sent to port %d: the tap sees nothing", port)
				}
				if i := bytes.Index(sent, []byte(linkModelKey)); i >= 0 {
					t.Errorf("the model key was sent into the box on port %d: …%q…", port, sent[max(0, i-40):i+len(linkModelKey)])
				}
			}
		})
	}
}

// TestAgentStepRedactsAKeyTheGatewayEchoes: a gateway whose answer quotes the key (as some error
// bodies quote the request) does not hand it to the box: the box reads [redacted] instead.
func TestAgentStepRedactsAKeyTheGatewayEchoes(t *testing.T) {
	f := newLinkFixture(t)
	srv := modeltest.NewServer(t, linkModelKey, modeltest.Reply("you sent ", linkModelKey, " as your key"))
	f.useGateway(srv, agentvm.ProviderOpenAI)
	res, err := f.step(t, StepInput{RunID: "run_1", BoxID: agentBox, Owner: "usr_a", Step: 1, Model: "m", Task: "say it"})
	if err != nil {
		t.Fatal(err)
	}
	if sent := f.box.sentTo(wire.LinkPort); bytes.Contains(sent, []byte(linkModelKey)) || len(sent) == 0 {
		t.Fatalf("the box was sent the key the gateway echoed (%d bytes sent)", len(sent))
	}
	if !strings.Contains(res.Text, redactedKey) || strings.Contains(res.Text, linkModelKey) {
		t.Fatalf("the agent read %q", res.Text)
	}
}

func TestAgentLinkGatewayDownIsRetryable(t *testing.T) {
	f := newLinkFixture(t)
	f.gw.fail = errors.New("connect: connection refused")
	srv := modeltest.NewServer(t, linkModelKey, modeltest.Reply("never"))
	f.useGateway(srv, ProviderOpenAI)
	in := StepInput{RunID: "run_1", BoxID: agentBox, Owner: "usr_a", Step: 1, Model: "m", Task: "t"}
	_, err := f.step(t, in)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != ErrTypeUnavailable || app.NonRetryable() {
		t.Fatalf("gateway down: %v; want a retryable %s", err, ErrTypeUnavailable)
	}
	if cred := boxlink.Credential([]byte("key"), agentBox); strings.Contains(err.Error(), cred) || strings.Contains(err.Error(), linkModelKey) {
		t.Errorf("a secret in the error: %v", err)
	}
	if len(srv.Requests()) != 0 {
		t.Errorf("the model server saw %d requests", len(srv.Requests()))
	}
	f.assertLinksClosed(t)
}

func TestAgentLinkRefusesAWrongCredential(t *testing.T) {
	f := newLinkFixture(t)
	ref := sandbox.SandboxRef{ID: "sb_1", Token: "tok"}
	for cred, want := range map[string]error{
		boxlink.Credential([]byte("key"), agentBox):   nil,
		boxlink.Credential([]byte("other"), agentBox): errors.New("agent refused link: invalid credential"),
	} {
		link, err := f.box.DialPort(t.Context(), ref, wire.LinkPort)
		if err != nil {
			t.Fatal(err)
		}
		err = handshake(link, linkPreamble(boxlink.Box{Ref: ref, Cred: cred}, "run_1", 1))
		link.Close()
		if (err == nil) != (want == nil) || (err != nil && err.Error() != want.Error()) {
			t.Errorf("handshake: %v, want %v", err, want)
		}
	}
}

func TestAgentLinkStopClosesIdleLinks(t *testing.T) {
	f := newLinkFixture(t)
	ref := sandbox.SandboxRef{ID: "sb_1", Token: "tok"}
	stop := f.a.keepLinks(t.Context(), boxlink.Box{ID: agentBox, Ref: ref, Cred: boxlink.Credential([]byte("key"), agentBox)}, "run_1", 1, route{}, nil)
	deadline := time.Now().Add(10 * time.Second)
	for open, _ := f.box.counts(wire.LinkPort); open < idleLinks; open, _ = f.box.counts(wire.LinkPort) {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle links open, want %d", open, idleLinks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not return: idle links hold their goroutines")
	}
	if open, dials := f.box.counts(wire.LinkPort); open != 0 || dials != idleLinks {
		t.Errorf("after stop: %d of %d links open; want 0 of %d", open, dials, idleLinks)
	}
}

// listen serves each connection of a new loopback listener with serve until the test ends.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return lis.Addr().String()
}

func TestAgentLinkFloodIsBounded(t *testing.T) {
	// The box's root replaced the agent: every link is accepted and used at once, for a
	// request whose body never ends.
	agent := listen(t, func(c net.Conn) {
		b := make([]byte, 1)
		for b[0] != '\n' {
			if _, err := c.Read(b); err != nil {
				return
			}
		}
		if _, err := io.WriteString(c, "OK\nPOST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{"); err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, c)
	})
	// The gateway holds every connection open.
	gateway := listen(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	box := &linkBox{ports: map[int]string{wire.LinkPort: agent}, open: map[int]int{}, dials: map[int]int{}}
	gw := &gatewayDials{}
	a := &Agent{Link: &boxlink.Link{Sandbox: box}, DialGateway: gw.dial}
	ref := sandbox.SandboxRef{ID: "sb_1", Token: "tok"}
	stop := a.keepLinks(t.Context(), boxlink.Box{Ref: ref, Cred: "cred"}, "run_1", 1, route{path: "/v1/chat/completions", target: "http://" + gateway + "/v1/chat/completions"}, nil)
	defer stop()

	peak := func() int {
		gw.mu.Lock()
		defer gw.mu.Unlock()
		return gw.peak
	}
	deadline := time.Now().Add(10 * time.Second)
	for peak() < maxGatewayPipes {
		if time.Now().After(deadline) {
			t.Fatalf("%d gateway connections, want the bound %d reached", peak(), maxGatewayPipes)
		}
		time.Sleep(time.Millisecond)
	}
	// Unbounded, the flood opens hundreds in this time.
	time.Sleep(500 * time.Millisecond)
	if n := peak(); n > maxGatewayPipes {
		t.Errorf("%d gateway connections open at once, want at most %d", n, maxGatewayPipes)
	}
	if _, dials := box.counts(wire.LinkPort); dials > maxGatewayPipes {
		t.Errorf("%d links opened while every pipe was live, want at most %d", dials, maxGatewayPipes)
	}

	stop()
	if open, _ := box.counts(wire.LinkPort); open != 0 {
		t.Errorf("%d links open after stop", open)
	}
	gw.mu.Lock()
	defer gw.mu.Unlock()
	if gw.open != 0 {
		t.Errorf("%d gateway connections open after stop", gw.open)
	}
}
