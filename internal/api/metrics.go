package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/internal/health"
)

// publicMethods need no token: load balancers probe health, and reflection describes only the
// schema, which is public anyway.
var publicMethods = []string{"/grpc.health.v1.Health/", "/grpc.reflection."}

func isPublic(method string) bool {
	for _, p := range publicMethods {
		if strings.HasPrefix(method, p) {
			return true
		}
	}
	return false
}

// unary is the server's unary interceptor: it authenticates every call but the public ones and
// counts every call, whichever protocol it arrived in (Connect calls pass through here too).
func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer s.metrics.observe(info.FullMethod, time.Now(), &err)
	if isPublic(info.FullMethod) {
		return handler(ctx, req)
	}
	return s.unaryAuth(ctx, req, info, handler)
}

// stream is unary's counterpart for streaming calls.
func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer s.metrics.observe(info.FullMethod, time.Now(), &err)
	if isPublic(info.FullMethod) {
		return handler(srv, ss)
	}
	return s.streamAuth(srv, ss, info, handler)
}

// latencyBuckets are the histogram's upper bounds in seconds: from a cached read to a snapshot.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// metrics counts RPCs by method and gRPC code and keeps a latency histogram per method, served
// in the Prometheus text format. Labels are method names and codes only: never a request's
// content or its caller.
type metrics struct {
	mu    sync.Mutex
	calls map[[2]string]uint64 // method, code
	hist  map[string]*histogram
}

type histogram struct {
	buckets []uint64 // per latencyBuckets, not cumulative
	count   uint64
	sum     float64
}

func newMetrics() *metrics {
	return &metrics{calls: map[[2]string]uint64{}, hist: map[string]*histogram{}}
}

// observe records a finished call; err points at the call's final error.
func (m *metrics) observe(method string, start time.Time, err *error) {
	secs := time.Since(start).Seconds()
	code := status.Code(*err).String()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[[2]string{method, code}]++
	h := m.hist[method]
	if h == nil {
		h = &histogram{buckets: make([]uint64, len(latencyBuckets))}
		m.hist[method] = h
	}
	h.count++
	h.sum += secs
	for i, le := range latencyBuckets {
		if secs <= le {
			h.buckets[i]++
			break
		}
	}
}

// serveMetrics writes the RPC metrics and the health gauges in the Prometheus text format.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	s.metrics.write(&b)
	health.WriteMetrics(&b, s.health.Report(r.Context()))
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(b.String()))
}

// write writes the RPC counters and histograms.
func (m *metrics) write(b *strings.Builder) {
	m.mu.Lock()
	keys := make([][2]string, 0, len(m.calls))
	for k := range m.calls {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return strings.Compare(a[0]+" "+a[1], b[0]+" "+b[1]) })
	b.WriteString("# HELP cocoonbox_api_requests_total RPCs handled, by method and gRPC status code.\n")
	b.WriteString("# TYPE cocoonbox_api_requests_total counter\n")
	for _, k := range keys {
		fmt.Fprintf(b, "cocoonbox_api_requests_total{method=%q,code=%q} %d\n", k[0], k[1], m.calls[k])
	}
	methods := make([]string, 0, len(m.hist))
	for k := range m.hist {
		methods = append(methods, k)
	}
	slices.Sort(methods)
	b.WriteString("# HELP cocoonbox_api_request_duration_seconds How long RPCs took, by method.\n")
	b.WriteString("# TYPE cocoonbox_api_request_duration_seconds histogram\n")
	for _, method := range methods {
		h := m.hist[method]
		var cum uint64
		for i, le := range latencyBuckets {
			cum += h.buckets[i]
			fmt.Fprintf(b, "cocoonbox_api_request_duration_seconds_bucket{method=%q,le=\"%g\"} %d\n", method, le, cum)
		}
		fmt.Fprintf(b, "cocoonbox_api_request_duration_seconds_bucket{method=%q,le=\"+Inf\"} %d\n", method, h.count)
		fmt.Fprintf(b, "cocoonbox_api_request_duration_seconds_sum{method=%q} %g\n", method, h.sum)
		fmt.Fprintf(b, "cocoonbox_api_request_duration_seconds_count{method=%q} %d\n", method, h.count)
	}
	m.mu.Unlock()
}
