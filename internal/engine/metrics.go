package engine

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// Prometheus text exposition, written by hand: a dozen series do not justify a client library
// in the engine's dependencies.

// families are the engine's counters: name, help, and the one label that splits each.
var families = map[string]struct{ name, help, label string }{
	"claims":       {"cocoonbox_engine_claims_total", "Sandboxes claimed, by where the box came from.", "source"},
	"releases":     {"cocoonbox_engine_releases_total", "Sandboxes ended, by why.", "reason"},
	"hibernations": {"cocoonbox_engine_hibernations_total", "Sandboxes hibernated, by what asked.", "trigger"},
	"wakes":        {"cocoonbox_engine_wakes_total", "Sandboxes woken, by what asked.", "trigger"},
	"execs":        {"cocoonbox_engine_execs_total", "Exec requests, by outcome.", "result"},
	"checkpoints":  {"cocoonbox_engine_checkpoints_total", "Checkpoint events.", "event"},
	"runtime_err":  {"cocoonbox_engine_runtime_errors_total", "Runtime calls that failed, by operation.", "op"},
}

var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

type histogram struct {
	counts []uint64 // per bucket, not cumulative
	sum    float64
	n      uint64
}

func (h *histogram) add(d time.Duration) {
	s := d.Seconds()
	if h.counts == nil {
		h.counts = make([]uint64, len(latencyBuckets))
	}
	if i, _ := slices.BinarySearch(latencyBuckets, s); i < len(latencyBuckets) {
		h.counts[i]++
	}
	h.sum += s
	h.n++
}

type requestKey struct {
	route string
	code  int
}

// metrics holds the counters; gauges are read from the engine at scrape time.
type metrics struct {
	mu         sync.Mutex
	counters   map[string]map[string]uint64
	claimTime  map[string]*histogram // by source
	opTime     map[string]*histogram // runtime call latency by op
	requests   map[requestKey]uint64
	relaysOpen int64
	relayBytes [2]uint64 // to the box, from the box
}

func newMetrics() *metrics {
	return &metrics{
		counters: map[string]map[string]uint64{}, claimTime: map[string]*histogram{},
		opTime: map[string]*histogram{}, requests: map[requestKey]uint64{},
	}
}

func (m *metrics) count(family, label string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.counters[family] == nil {
		m.counters[family] = map[string]uint64{}
	}
	m.counters[family][label]++
}

func (m *metrics) claimed(source string, d time.Duration) {
	m.count("claims", source)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.claimTime[source] == nil {
		m.claimTime[source] = &histogram{}
	}
	m.claimTime[source].add(d)
}

// observe records one runtime call's latency, and its failure.
func (m *metrics) observe(op string, d time.Duration, err error) {
	if err != nil {
		m.count("runtime_err", op)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.opTime[op] == nil {
		m.opTime[op] = &histogram{}
	}
	m.opTime[op].add(d)
}

func (m *metrics) relayOpened() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.relaysOpen++
}

func (m *metrics) relayClosed(up, down int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.relaysOpen--
	m.relayBytes[0] += uint64(up)
	m.relayBytes[1] += uint64(down)
}

// instrument counts requests by route pattern and status.
func (m *metrics) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		m.mu.Lock()
		m.requests[requestKey{r.Pattern, code}]++
		m.mu.Unlock()
	})
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

// Hijack passes the relay's takeover through; a hijacked request is counted as a 101.
func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err == nil && s.code == 0 {
		s.code = http.StatusSwitchingProtocols
	}
	return c, brw, err
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// handleMetrics writes the Prometheus text exposition.
func (e *Engine) handleMetrics(w http.ResponseWriter, _ *http.Request, _ caller) error {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	var sb strings.Builder
	e.writeMetrics(&sb)
	_, err := io.WriteString(w, sb.String())
	return err
}

func (e *Engine) writeMetrics(w *strings.Builder) {
	info := e.info()
	caps := e.rt.Capabilities()
	gauge(w, "cocoonbox_engine_runtime_info", "The runtime running the boxes and whether hibernate keeps memory (value 1).")
	fmt.Fprintf(w, "cocoonbox_engine_runtime_info{runtime=%s,memory_hibernate=\"%t\"} 1\n", quote(e.rt.Name()), caps.MemoryHibernate)
	gauge(w, "cocoonbox_engine_sandboxes", "Claimed sandboxes by state.")
	fmt.Fprintf(w, "cocoonbox_engine_sandboxes{state=\"running\"} %d\n", info.Claimed-info.Hibernated)
	fmt.Fprintf(w, "cocoonbox_engine_sandboxes{state=\"hibernated\"} %d\n", info.Hibernated)
	for _, g := range []struct {
		name, help string
		v          func(sandbox.PoolInfo) int
	}{
		{"cocoonbox_engine_pool_warm", "Warm boxes ready to claim.", func(p sandbox.PoolInfo) int { return p.Warm }},
		{"cocoonbox_engine_pool_target", "Warm boxes a pool should hold.", func(p sandbox.PoolInfo) int { return p.Target }},
		{"cocoonbox_engine_pool_refilling", "Warm boxes starting.", func(p sandbox.PoolInfo) int { return p.Refilling }},
	} {
		gauge(w, g.name, g.help)
		for _, p := range info.Pools {
			fmt.Fprintf(w, "%s{template=%s,net=%s,size=%s} %d\n", g.name, quote(p.Key.Template), quote(p.Key.Net), quote(p.Key.Size), g.v(p))
		}
	}
	e.mu.Lock()
	stored := len(e.checkpoints)
	e.mu.Unlock()
	gauge(w, "cocoonbox_engine_checkpoints_stored", "Checkpoints on disk.")
	fmt.Fprintf(w, "cocoonbox_engine_checkpoints_stored %d\n", stored)

	m := e.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	gauge(w, "cocoonbox_engine_relays_open", "Open ports relays.")
	fmt.Fprintf(w, "cocoonbox_engine_relays_open %d\n", m.relaysOpen)
	counter(w, "cocoonbox_engine_relay_bytes_total", "Bytes carried by ports relays.")
	fmt.Fprintf(w, "cocoonbox_engine_relay_bytes_total{direction=\"to_box\"} %d\n", m.relayBytes[0])
	fmt.Fprintf(w, "cocoonbox_engine_relay_bytes_total{direction=\"from_box\"} %d\n", m.relayBytes[1])
	for _, fam := range slices.Sorted(maps.Keys(families)) {
		f := families[fam]
		counter(w, f.name, f.help)
		for _, label := range slices.Sorted(maps.Keys(m.counters[fam])) {
			fmt.Fprintf(w, "%s{%s=%s} %d\n", f.name, f.label, quote(label), m.counters[fam][label])
		}
	}
	writeHistograms(w, "cocoonbox_engine_claim_seconds", "Claim latency by where the box came from.", "source", m.claimTime)
	writeHistograms(w, "cocoonbox_engine_runtime_seconds", "Runtime call latency by operation.", "op", m.opTime)
	counter(w, "cocoonbox_engine_http_requests_total", "HTTP requests by route and status.")
	keys := slices.SortedFunc(maps.Keys(m.requests), func(a, b requestKey) int {
		if c := strings.Compare(a.route, b.route); c != 0 {
			return c
		}
		return a.code - b.code
	})
	for _, k := range keys {
		fmt.Fprintf(w, "cocoonbox_engine_http_requests_total{route=%s,code=\"%d\"} %d\n", quote(k.route), k.code, m.requests[k])
	}
}

func writeHistograms(w *strings.Builder, name, help, label string, hs map[string]*histogram) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	for _, key := range slices.Sorted(maps.Keys(hs)) {
		h := hs[key]
		var cum uint64
		for i, le := range latencyBuckets {
			cum += h.counts[i]
			fmt.Fprintf(w, "%s_bucket{%s=%s,le=\"%s\"} %d\n", name, label, quote(key), strconv.FormatFloat(le, 'g', -1, 64), cum)
		}
		fmt.Fprintf(w, "%s_bucket{%s=%s,le=\"+Inf\"} %d\n", name, label, quote(key), h.n)
		fmt.Fprintf(w, "%s_sum{%s=%s} %g\n", name, label, quote(key), h.sum)
		fmt.Fprintf(w, "%s_count{%s=%s} %d\n", name, label, quote(key), h.n)
	}
}

func gauge(w *strings.Builder, name, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
}

func counter(w *strings.Builder, name, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
}

// quote writes a label value with the exposition format's escapes.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}
