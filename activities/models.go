package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// modelListTTL is how long a gateway's model list is trusted before it is asked again.
const modelListTTL = 5 * time.Minute

// maxModelList bounds the bytes of a gateway's model list the worker reads.
const maxModelList = 4 << 20

// modelLists caches each gateway's model list (GET /models), by its URL.
type modelLists struct {
	mu   sync.Mutex
	seen map[string]modelList
}

type modelList struct {
	ids []string // nil: the gateway has no list
	at  time.Time
}

// checkModel refuses, before a run's first step, a model the gateway does not list (GET
// <base>/models for openai, <base>/v1/models for anthropic), naming the ones it has. A gateway
// without the list (404, or an answer that is not one) or one that cannot be reached is not a
// refusal: the model call itself says what is wrong.
func (a *Agent) checkModel(ctx context.Context, rt route, model string) error {
	ids, err := a.models.list(ctx, a.dialGateway, rt)
	if err != nil {
		logger(ctx).Warn("read the gateway's model list; the run goes on without the check", "error", err.Error())
		return nil
	}
	if ids == nil || slices.Contains(ids, model) {
		return nil
	}
	shown := ids
	if len(shown) > 20 {
		shown = append(shown[:20:20], fmt.Sprintf("and %d more", len(ids)-20))
	}
	return fmt.Errorf("model %q is not offered by the gateway (its GET /models lists %s)", model, strings.Join(shown, ", "))
}

func (l *modelLists) list(ctx context.Context, dial dialer, rt route) ([]string, error) {
	l.mu.Lock()
	got, ok := l.seen[rt.modelsURL]
	l.mu.Unlock()
	if ok && time.Since(got.at) < modelListTTL {
		return got.ids, nil
	}
	ids, err := fetchModels(ctx, dial, rt)
	if err != nil || ids == nil {
		return nil, err // a gateway without a list is asked again next run: it may get one
	}
	l.mu.Lock()
	if l.seen == nil {
		l.seen = map[string]modelList{}
	}
	l.seen[rt.modelsURL] = modelList{ids: ids, at: time.Now()}
	l.mu.Unlock()
	return ids, nil
}

// dialer dials the gateway.
type dialer = func(ctx context.Context, network, addr string) (net.Conn, error)

// fetchModels asks the gateway for its models; nil without an error is a gateway that has no
// list.
func fetchModels(ctx context.Context, dial dialer, rt route) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rt.modelsURL, nil)
	if err != nil {
		return nil, err
	}
	if rt.key != "" {
		req.Header.Set(rt.keyHeader, rt.key)
	}
	req.Header.Set("Anthropic-Version", "2023-06-01") // an OpenAI gateway ignores it
	client, tr := newGatewayClient(dial)
	defer tr.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", rt.modelsURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", rt.modelsURL, resp.Status)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxModelList)).Decode(&list); err != nil || len(list.Data) == 0 {
		return nil, nil // not a list this worker reads: no check
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids, nil
}
