package activities

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// Providers a Gateway speaks.
const (
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
	// ProviderOpenAIResponses is OpenAI's Responses protocol (POST <base>/responses).
	ProviderOpenAIResponses = "openai-responses"
)

// Gateway is the operator's model gateway, from the worker's own configuration: where every
// box's model calls go, in which protocol, and which of the run starter's vault secrets holds
// the key. No workflow or activity input names any of it, so whoever can start a workflow
// cannot send a user's key elsewhere.
type Gateway struct {
	// Provider is the gateway's wire protocol: ProviderOpenAI (chat completions),
	// ProviderOpenAIResponses (responses) or ProviderAnthropic (messages).
	Provider string
	// BaseURL is the gateway's URL as the provider's client takes it (https://api.openai.com/v1,
	// https://api.anthropic.com); http only for a gateway on a trusted network, such as tests.
	BaseURL string
	// KeySecret names the vault secret of the run's starter that holds the key; "" sends none.
	KeySecret string
	// Models are the models runs may use; empty allows any.
	Models []string
	// FallbackModels are tried in order when a step's model still fails with an error worth
	// another try (overloaded, 5xx) after the agent's retries.
	FallbackModels []string
}

// boxGatewayHost is the host in the base URL the box's agent is given. Any host would do: every
// connection of a step's model client is a model link, whatever it dials.
const boxGatewayHost = "model-gateway.cocoonbox.invalid"

// route is a gateway's one endpoint for its provider, as the box posts to it and as the worker
// forwards it, with the key the worker adds.
type route struct {
	boxBase   string // the base URL the agent's model client is given (plain http, over links)
	path      string // the only path a box's request may name
	target    string // the gateway URL requests are sent to
	modelsURL string // the gateway's list of models (GET)
	keyHeader string
	key       string // the key header's value; never logged, never sent into the box
	secret    string // the key itself, cut out of the gateway's answers
}

// route checks g and returns its endpoint carrying key.
func (g Gateway) route(key string) (route, error) {
	u, err := url.Parse(g.BaseURL)
	switch {
	case g.BaseURL == "":
		// Any worker of the shared queue may take a run's step: one without the agent section
		// (a node's worker set up apart, say) fails the steps it takes.
		return route{}, errors.New("no model gateway is set on this worker (agent.base_url): every worker needs the same agent section to run agent steps")
	case err != nil:
		return route{}, errors.New("gateway base_url is not a URL")
	case u.Scheme != "https" && u.Scheme != "http":
		return route{}, fmt.Errorf("gateway base_url scheme must be http or https, not %q", u.Scheme)
	case u.Hostname() == "":
		return route{}, errors.New("gateway base_url has no host")
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return route{}, errors.New("gateway base_url must not have a query, fragment or user")
	}
	base := strings.TrimSuffix(u.EscapedPath(), "/")
	r := route{boxBase: "http://" + boxGatewayHost + base, key: key, secret: key}
	switch g.Provider {
	case ProviderOpenAI:
		r.path, r.keyHeader = base+"/chat/completions", "Authorization"
		if key != "" {
			r.key = "Bearer " + key
		}
	case ProviderOpenAIResponses:
		r.path, r.keyHeader = base+"/responses", "Authorization"
		if key != "" {
			r.key = "Bearer " + key
		}
	case ProviderAnthropic:
		r.path, r.keyHeader = base+"/v1/messages", "X-Api-Key"
	default:
		return route{}, fmt.Errorf("gateway provider must be %s, %s or %s, not %q", ProviderOpenAI, ProviderAnthropic, ProviderOpenAIResponses, g.Provider)
	}
	r.target = u.Scheme + "://" + u.Host + r.path
	// The list of models is beside the endpoint: <base>/models, <base>/v1/models for anthropic.
	models := base
	if g.Provider == ProviderAnthropic {
		models += "/v1"
	}
	r.modelsURL = u.Scheme + "://" + u.Host + models + "/models"
	return r, nil
}

// allows says whether runs may use model.
func (g Gateway) allows(model string) bool {
	return len(g.Models) == 0 || slices.Contains(g.Models, model)
}

const (
	// linkHeadTimeout bounds the arrival of a request head once its first byte came.
	linkHeadTimeout = 30 * time.Second
	// linkLinger and maxLinkLinger bound what is read and dropped of a refused request, so
	// that the box reads the refusal before the link closes.
	linkLinger    = 2 * time.Second
	maxLinkLinger = 256 << 10
)

// newGatewayClient returns the HTTP client of one step's model calls: it dials only through
// dial, verifies the gateway's certificate, and never follows a redirect (which could carry the
// key elsewhere). Close its transport's idle connections when the step ends.
func newGatewayClient(dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*http.Client, *http.Transport) {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         dial,
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConns:        maxGatewayPipes,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, tr
}

// serve answers the one request the box sends on a link: refused with a status its model client
// reads, or sent to the gateway with the key and its answer streamed back as it arrives (the
// providers stream replies as server-sent events).
func (m *modelLinks) serve(ctx context.Context, link sandbox.Conn, br *bufio.Reader) {
	defer m.close(link)
	_ = link.SetReadDeadline(time.Now().Add(linkHeadTimeout))
	req, err := readLinkHead(br)
	if err == nil {
		err = checkEndpoint(req, m.route.path)
	}
	if err == nil {
		err = m.meter.allow(ctx) // the run's token bound, before the gateway sees the call
	}
	if err != nil {
		var le *linkError
		if !errors.As(err, &le) {
			return // the agent closed the link
		}
		m.log.Warn("model link request refused", "sandbox", m.ref.ID, "status", le.status, "reason", le.msg)
		_ = writeLinkError(link, le.status, le.msg)
		_ = link.CloseWrite()
		// Closing with unread bytes would reset the link before the box read the refusal.
		_ = link.SetReadDeadline(time.Now().Add(linkLinger))
		_, _ = io.CopyN(io.Discard, br, maxLinkLinger)
		return
	}
	_ = link.SetReadDeadline(time.Time{})
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, m.route.target, io.LimitReader(br, req.ContentLength))
	if err != nil {
		_ = writeLinkError(link, http.StatusInternalServerError, "build gateway request")
		return
	}
	out.ContentLength = req.ContentLength
	if req.ContentLength == 0 {
		out.Body = http.NoBody
	}
	copyHeaders(out.Header, req.Header, forwardedRequestHeaders)
	if m.route.key != "" {
		out.Header.Set(m.route.keyHeader, m.route.key)
	}
	sent := time.Now()
	resp, err := m.client.Do(out)
	if err != nil {
		m.recordCall(ctx, 0, nil, sent)
		if ctx.Err() != nil {
			return
		}
		// The agent's model client retries a 502 like any gateway failure.
		m.log.Warn("model gateway call", "sandbox", m.ref.ID, "gateway", m.route.target, "error", err.Error())
		_ = writeLinkError(link, http.StatusBadGateway, "the gateway could not be reached")
		_ = link.CloseWrite()
		return
	}
	defer resp.Body.Close()
	usage := &usageScanner{}
	defer func() { m.recordCall(ctx, resp.StatusCode, usage, sent) }()
	if mt := m.meter; mt != nil && mt.texts != nil && resp.StatusCode == http.StatusOK {
		// The run's followers read the model's text as it comes, not only once the step is done.
		pump := newTextPump(ctx, mt.texts, mt.call.RunID, mt.call.Step, m.route.secret, func(err error) {
			m.log.Warn("stream run text", "run", mt.call.RunID, "error", err.Error())
		})
		usage.onText = pump.add
		defer pump.close()
	}
	h := http.Header{}
	copyHeaders(h, resp.Header, forwardedResponseHeaders)
	if err := writeLinkResponse(link, resp.StatusCode, h); err != nil {
		return
	}
	// Each read is written at once: an event must reach the box when the gateway sent it. The
	// key is cut out of the answer on the way: a gateway may quote it back in an error.
	out2box := newRedactor(link, m.route.secret)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			_, _ = usage.Write(buf[:n])
			if _, werr := out2box.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	if out2box.Flush() != nil {
		return
	}
	if out2box.hits > 0 {
		m.log.Warn("the model gateway's answer held the key; it was redacted before the box saw it",
			"sandbox", m.ref.ID, "gateway", m.route.target, "status", resp.StatusCode)
	}
	_ = link.CloseWrite()
	if m.answered != nil && resp.StatusCode/100 == 2 {
		m.answered()
	}
}

// recordCall writes one relayed call to the ledger; a failure is logged, the step goes on.
func (m *modelLinks) recordCall(ctx context.Context, status int, u *usageScanner, sent time.Time) {
	if err := m.meter.record(ctx, status, u, time.Since(sent)); err != nil {
		m.log.Warn("record model call usage", "sandbox", m.ref.ID, "error", err.Error())
	}
}
