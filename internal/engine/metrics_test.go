package engine_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// sampleLine is one sample of the Prometheus text format: name, optional labels, value.
var sampleLine = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*",?)*\})? -?[0-9.e+]+|\+Inf$`)

// TestMetrics checks the exposition format line by line and the series a dashboard relies on.
func TestMetrics(t *testing.T) {
	h := newHarness(t)
	if err := h.rt.ServePort(7, echo); err != nil {
		t.Fatal(err)
	}
	h.must(200, "PUT", "/v1/pools", rootToken, sandbox.PoolsRequest{Pools: []sandbox.PoolSpec{{Template: "base", Warm: 1}}})
	h.tick()
	warm := h.claim(rootToken, sandbox.ClaimRequest{})
	cold := h.claim(rootToken, sandbox.ClaimRequest{Size: "xlarge"})
	h.must(204, "POST", "/v1/sandboxes/"+cold.ID+"/hibernate", cold.Token, nil)
	h.exec(warm, "echo")
	c := dialRelay(t, h, warm.ID, 7, warm.Token)
	roundTrip(t, c, "12345")
	c.Close()
	testutil.Eventually(t, testutil.WaitShort, "the relay to be counted closed", func() bool {
		return strings.Contains(string(h.must(200, "GET", "/metrics", rootToken, nil)), "cocoonbox_engine_relays_open 0")
	})

	code, data, hdr := h.call("GET", "/metrics", rootToken, nil)
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("metrics: %d %v", code, hdr)
	}
	text := string(data)
	types := map[string]bool{}
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(name)
			if len(f) != 2 || types[f[0]] {
				t.Fatalf("bad or repeated TYPE line %q", line)
			}
			types[f[0]] = true
			continue
		}
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		if !sampleLine.MatchString(line) {
			t.Fatalf("not a sample line: %q", line)
		}
	}
	for _, want := range []string{
		`cocoonbox_engine_runtime_info{runtime="fake",memory_hibernate="true"} 1`,
		`cocoonbox_engine_sandboxes{state="running"} 1`,
		`cocoonbox_engine_sandboxes{state="hibernated"} 1`,
		`cocoonbox_engine_claims_total{source="warm"} 1`,
		`cocoonbox_engine_claims_total{source="cold"} 1`,
		`cocoonbox_engine_hibernations_total{trigger="request"} 1`,
		`cocoonbox_engine_execs_total{result="ok"} 1`,
		`cocoonbox_engine_pool_target{template="base",net="none",size="small"} 1`,
		`cocoonbox_engine_relay_bytes_total{direction="to_box"} 5`,
		`cocoonbox_engine_relay_bytes_total{direction="from_box"} 5`,
		`cocoonbox_engine_claim_seconds_count{source="cold"} 1`,
		`cocoonbox_engine_runtime_seconds_bucket{op="hibernate",le="+Inf"} 1`,
		`cocoonbox_engine_http_requests_total{route="POST /v1/claim",code="200"} 2`,
		`cocoonbox_engine_http_requests_total{route="GET /v1/sandboxes/{id}/ports/{port}",code="101"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestServe runs the engine as the command does — Serve on a real listener with its loops —
// and stops it through the context.
func TestServe(t *testing.T) {
	h := newHarness(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.eng.Serve(ctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Fatalf("healthz %q", body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}
