package engine_test

import (
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/enginetest"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// TestUnsandboxedRuntimeServesOneUser: a runtime with no sandbox between boxes and the host
// kernel (the process runtime) serves one user. The engine's users are the credentials that
// may claim boxes: the root token, and each tenant token; with tenant tokens configured the
// engine refuses to start over such a runtime.
func TestUnsandboxedRuntimeServesOneUser(t *testing.T) {
	unsandboxed := enginetest.NewWith("process", runtime.Capabilities{Isolation: "namespaces"})
	t.Cleanup(unsandboxed.Close)
	images := func(string) (string, error) { return t.TempDir(), nil }
	_, err := engine.New(engine.Options{Dir: t.TempDir(), Runtime: unsandboxed, Images: images,
		RootToken: rootToken, TenantTokens: []string{tenantA}})
	if err == nil || !strings.Contains(err.Error(), "tenant") || !strings.Contains(err.Error(), "one user") {
		t.Fatalf("an unsandboxed runtime with tenant tokens: %v; want a refusal naming tenant tokens", err)
	}
	e, err := engine.New(engine.Options{Dir: t.TempDir(), Runtime: unsandboxed, Images: images, RootToken: rootToken})
	if err != nil {
		t.Fatalf("an unsandboxed runtime for the root token alone: %v", err)
	}
	_ = e.Close()
}

// TestHealthzStatesIsolation: the engine's health answer says what isolates its boxes, beside
// the contract's "ok".
func TestHealthzStatesIsolation(t *testing.T) {
	h := newHarness(t)
	code, data, hdr := h.call("GET", "/healthz", "", nil)
	if code != 200 || string(data) != "ok" {
		t.Fatalf("healthz: %d %q", code, data)
	}
	if got, want := hdr.Get(engine.IsolationHeader), h.rt.Capabilities().Isolation; got != want || got == "" {
		t.Fatalf("healthz %s: %q, want %q", engine.IsolationHeader, got, want)
	}
}

// TestMaxSandboxesNamesTheLimit: a claim beyond MaxSandboxes answers 429 (no capacity) with
// Retry-After, and the message names the limit and its value.
func TestMaxSandboxesNamesTheLimit(t *testing.T) {
	h := newHarness(t, func(o *engine.Options) { o.MaxSandboxes = 1 })
	h.claim(rootToken, sandbox.ClaimRequest{})
	code, data, hdr := h.call("POST", "/v1/claim", rootToken, sandbox.ClaimRequest{Template: "base"})
	if code != 429 || hdr.Get("Retry-After") == "" {
		t.Fatalf("claim over the limit: %d, Retry-After %q", code, hdr.Get("Retry-After"))
	}
	if msg := errorOf(t, data); !strings.Contains(msg, "max_sandboxes") || !strings.Contains(msg, "1") {
		t.Fatalf("claim over the limit: %q; want it to name max_sandboxes and its value", msg)
	}
	if info := h.info(); !info.AtCapacity || !strings.Contains(info.AtCapacityReason, "max_sandboxes") {
		t.Fatalf("info at the limit: at_capacity %v, reason %q", info.AtCapacity, info.AtCapacityReason)
	}
}

// TestMemoryAdmission: the boxes' sizes may add up to the host's memory less 1 GiB, times
// memory_overcommit; a claim beyond it answers no capacity naming the setting and the figures (429,
// no capacity, with Retry-After), info says the engine is at capacity, and a release makes room
// again. Hibernated boxes count: their memory must be there when they wake.
func TestMemoryAdmission(t *testing.T) {
	const host = 3 << 30 // 2 GiB for boxes
	for _, c := range []struct {
		overcommit float64
		fit        int // small boxes (512 MiB) beside one medium (1 GiB)
	}{{0, 2}, {1, 2}, {2, 6}} {
		h := newHarness(t, func(o *engine.Options) {
			o.HostMemoryBytes, o.MemoryOvercommit, o.MaxSandboxes = host, c.overcommit, 50
		})
		h.claim(rootToken, sandbox.ClaimRequest{Size: "medium"})
		var last sandbox.ClaimResponse
		for range c.fit {
			last = h.claim(rootToken, sandbox.ClaimRequest{Size: "small"})
		}
		h.must(204, "POST", "/v1/sandboxes/"+last.ID+"/hibernate", last.Token, nil)
		code, data, hdr := h.call("POST", "/v1/claim", rootToken, sandbox.ClaimRequest{Template: "base", Size: "small"})
		if code != 429 || hdr.Get("Retry-After") == "" {
			t.Fatalf("overcommit %g: claim %d: %d, Retry-After %q; want 429", c.overcommit, c.fit+2, code, hdr.Get("Retry-After"))
		}
		if msg := errorOf(t, data); !strings.Contains(msg, "memory_overcommit") || !strings.Contains(msg, "needs 512 MiB") {
			t.Fatalf("overcommit %g: %q; want it to name memory_overcommit and what the box needs", c.overcommit, msg)
		}
		if info := h.info(); !info.AtCapacity || !strings.Contains(info.AtCapacityReason, "memory_overcommit") {
			t.Fatalf("overcommit %g: info at_capacity %v, reason %q", c.overcommit, info.AtCapacity, info.AtCapacityReason)
		}
		h.must(204, "POST", "/v1/sandboxes/"+last.ID+"/release", last.Token, nil)
		h.claim(rootToken, sandbox.ClaimRequest{Size: "small"})
	}
}

// TestDefaultMaxSandboxes: with no limit configured the engine allows one box per 512 MiB of
// host memory beyond 1 GiB kept for the host, and at least one.
func TestDefaultMaxSandboxes(t *testing.T) {
	for _, c := range []struct {
		mem  int64
		want int
	}{{0, 1}, {1 << 30, 1}, {3 << 29, 1}, {2 << 30, 2}, {24 << 30, 46}, {256 << 30, 510}} {
		if got := engine.DefaultMaxSandboxes(c.mem); got != c.want {
			t.Errorf("DefaultMaxSandboxes(%d MiB) = %d, want %d", c.mem>>20, got, c.want)
		}
	}
}
