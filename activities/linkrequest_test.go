package activities

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// askThroughLink is the box's root writing raw bytes on a model link instead of the agent: the
// first link the worker opens carries request, and the answer is what the worker wrote back
// before closing it. The worker forwards to gw with linkModelKey.
func askThroughLink(t *testing.T, gw *modeltest.Server, request string) string {
	t.Helper()
	return askThroughMeteredLink(t, gw, request, nil)
}

// askThroughMeteredLink is askThroughLink with the step's calls counted by mt.
func askThroughMeteredLink(t *testing.T, gw *modeltest.Server, request string, mt *meter) string {
	t.Helper()
	return askThroughProvider(t, gw, ProviderOpenAI, request, mt)
}

// askThroughProvider is askThroughMeteredLink to a gateway of provider.
func askThroughProvider(t *testing.T, gw *modeltest.Server, provider, request string, mt *meter) string {
	t.Helper()
	answer := make(chan string, 1)
	var once sync.Once
	agent := listen(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := br.ReadString('\n'); err != nil {
			return
		}
		if _, err := io.WriteString(c, "OK\n"); err != nil {
			return
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			_, _ = io.Copy(io.Discard, c) // a spare link, closed at the step's end
			return
		}
		if _, err := io.WriteString(c, request); err != nil {
			answer <- "write: " + err.Error()
			return
		}
		got, _ := io.ReadAll(br)
		answer <- string(got)
	})
	box := &linkBox{ports: map[int]string{wire.LinkPort: agent}, open: map[int]int{}, dials: map[int]int{}}
	a := &Agent{Link: &boxlink.Link{Sandbox: box}}
	base := gw.OpenAIBaseURL()
	if provider == ProviderAnthropic {
		base = gw.AnthropicBaseURL()
	}
	rt, err := Gateway{Provider: provider, BaseURL: base}.route(linkModelKey)
	if err != nil {
		t.Fatal(err)
	}
	stop := a.keepLinks(t.Context(), boxlink.Box{Ref: sandbox.SandboxRef{ID: "sb_1", Token: "tok"}, Cred: "cred"}, "run_1", 1, rt, mt)
	defer stop()
	return <-answer
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

func post(path, headers, body string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: model-gateway\r\nContent-Type: application/json\r\n" + headers +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// TestModelLinkForwardsOnlyTheProvidersEndpoint: whatever the box writes on a model link, the
// worker forwards only a POST to the provider's one endpoint, with its own key in place of any
// credential the box sent; everything else is answered with a status naming the limit, and the
// gateway never sees it.
func TestModelLinkForwardsOnlyTheProvidersEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name, request, status, says string
	}{
		{"another method", "GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", "405", "only POST /v1/chat/completions"},
		{"another path", post("/v1/embeddings", "", chatBody), "404", "only POST /v1/chat/completions"},
		{"a dot path", post("/v1/x/../chat/completions", "", chatBody), "404", "only POST"},
		{"a query", post("/v1/chat/completions?api-version=1", "", chatBody), "404", "only POST"},
		{"an absolute target", post("http://evil.example/v1/chat/completions", "", chatBody), "400", "must be a path"},
		{"a chunked body", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "411", "Content-Length"},
		{"a huge body", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n", "413", "exceeds"},
		{"a huge head", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("a", maxLinkHead) + "\r\n\r\n", "431", "exceed"},
		{"not HTTP", "hello there\r\n\r\n", "400", "not an HTTP/1.1 request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := modeltest.NewServer(t, linkModelKey)
			got := askThroughLink(t, gw, tc.request)
			if !strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" ") || !strings.Contains(got, tc.says) {
				t.Errorf("answer %q; want %s saying %q", cut(got, 300), tc.status, tc.says)
			}
			if n := len(gw.Requests()); n != 0 {
				t.Errorf("the gateway saw %d requests", n)
			}
		})
	}

	t.Run("the box's credentials are replaced", func(t *testing.T) {
		gw := modeltest.NewServer(t, linkModelKey, modeltest.Reply("hel", "lo"))
		stolen := "Authorization: Bearer sk-the-box-s-own\r\nX-Api-Key: sk-the-box-s-own\r\nCookie: c=1\r\nProxy-Authorization: Basic eDp5\r\n"
		body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		got := askThroughLink(t, gw, post("/v1/chat/completions", stolen, body))
		if !strings.HasPrefix(got, "HTTP/1.1 200 ") || !strings.Contains(got, "Content-Type: text/event-stream") ||
			!strings.Contains(got, `"content":"hel"`) || !strings.HasSuffix(got, "data: [DONE]\n\n") {
			t.Fatalf("streamed answer %q", cut(got, 2000))
		}
		reqs := gw.Requests()
		if len(reqs) != 1 {
			t.Fatalf("the gateway saw %d requests", len(reqs))
		}
		h := reqs[0].Header
		if h.Get("Authorization") != "Bearer "+linkModelKey || h.Get("X-Api-Key") != "" || h.Get("Cookie") != "" || h.Get("Proxy-Authorization") != "" {
			t.Errorf("the gateway got headers %v", h)
		}
		if string(reqs[0].Body) != body {
			t.Errorf("the gateway got body %q", reqs[0].Body)
		}
	})
}

// FuzzReadLinkHead: no request a box writes makes the parser panic, accept more than its
// bounds, or accept a body without a length.
func FuzzReadLinkHead(f *testing.F) {
	f.Add(post("/v1/chat/completions", "", chatBody))
	f.Add(post("/v1/messages", "Anthropic-Version: 2023-06-01\r\nX-Api-Key: k\r\n", chatBody))
	f.Add("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	f.Add("POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	f.Add("POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello")
	f.Add("POST http://evil/v1/chat/completions HTTP/1.0\n\n")
	f.Add("\r\n\r\n")
	f.Fuzz(func(t *testing.T, in string) {
		req, err := readLinkHead(bufio.NewReader(strings.NewReader(in)))
		if err != nil {
			var le *linkError
			if !errors.As(err, &le) && !errors.Is(err, io.EOF) {
				t.Fatalf("error %v is neither a refusal nor the link's end", err)
			}
			if le != nil && (le.status < 400 || le.status > 599 || http.StatusText(le.status) == "") {
				t.Fatalf("refusal with status %d", le.status)
			}
			return
		}
		if req.ContentLength < 0 || req.ContentLength > maxLinkBody || len(req.TransferEncoding) > 0 {
			t.Fatalf("accepted a body of length %d, encodings %v", req.ContentLength, req.TransferEncoding)
		}
		if !strings.HasPrefix(req.RequestURI, "/") {
			t.Fatalf("accepted target %q", req.RequestURI)
		}
		_ = checkEndpoint(req, "/v1/chat/completions")
	})
}

// TestNextStepLinkOnAnswer: once a model call's answer has reached the box, a link for the run's
// next step is dialed, before the step ends, so the next step's model call finds it waiting; an
// answer that failed opens none.
func TestNextStepLinkOnAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		turn modeltest.Turn
		want bool
	}{
		{"answered", modeltest.Reply("hello"), true},
		{"failed", modeltest.Fault(http.StatusBadRequest, "no"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := modeltest.NewServer(t, linkModelKey, tc.turn)
			var mu sync.Mutex
			var firsts []string
			answer := make(chan string, 1)
			var once sync.Once
			agent := listen(t, func(c net.Conn) {
				br := bufio.NewReader(c)
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				mu.Lock()
				firsts = append(firsts, strings.TrimSpace(line))
				mu.Unlock()
				if _, err := io.WriteString(c, "OK\n"); err != nil {
					return
				}
				first := false
				if strings.HasSuffix(strings.TrimSpace(line), " 1") {
					once.Do(func() { first = true })
				}
				if !first {
					_, _ = io.Copy(io.Discard, c)
					return
				}
				if _, err := io.WriteString(c, post("/v1/chat/completions", "", chatBody)); err != nil {
					return
				}
				got, _ := io.ReadAll(br)
				answer <- string(got)
			})
			box := &linkBox{ports: map[int]string{wire.LinkPort: agent}, open: map[int]int{}, dials: map[int]int{}}
			a := &Agent{Link: &boxlink.Link{Sandbox: box}}
			rt, err := Gateway{Provider: ProviderOpenAI, BaseURL: gw.OpenAIBaseURL()}.route(linkModelKey)
			if err != nil {
				t.Fatal(err)
			}
			stop := a.keepLinks(t.Context(), boxlink.Box{Ref: sandbox.SandboxRef{ID: "sb_1", Token: "tok"}, Cred: "cred"}, "run_1", 1, rt, nil)
			<-answer
			stop() // the step ends: whatever its answer set off is under way
			ch := a.prelinks.take("sb_1", "run_1", 2)
			if !tc.want {
				if ch != nil {
					closeAll(ch)
					t.Fatal("a failed answer opened a link for step 2")
				}
				return
			}
			if ch == nil {
				t.Fatal("no link was opened for step 2")
			}
			defer closeAll(ch)
			if err := testutil.Poll(t.Context(), testutil.WaitShort, func() error {
				mu.Lock()
				defer mu.Unlock()
				for _, l := range firsts {
					if strings.HasSuffix(l, " run_1 2") {
						return nil
					}
				}
				return fmt.Errorf("the box saw no link for step 2; its links: %q", firsts)
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
