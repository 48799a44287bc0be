package engine_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/loomhand/cocoonbox/internal/engine/enginetest"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// TestWarmPools: a pool fills to its target, a claim pops a warm box without starting one,
// the pool refills, a start failure backs off, and dropping the pool destroys its warm boxes.
func TestWarmPools(t *testing.T) {
	h := newHarness(t)
	info := decodeAs[sandbox.Info](t, h.must(200, "PUT", "/v1/pools", rootToken, sandbox.PoolsRequest{Pools: []sandbox.PoolSpec{
		{Template: "base", Size: "small", Warm: 2},
	}}))
	key := sandbox.PoolKey{Template: "base", Net: "none", Size: "small"}
	if len(info.Pools) != 1 || info.Pools[0].Key != key || info.Pools[0].Target != 2 || info.Pools[0].Golden {
		t.Fatalf("PUT /v1/pools answered %+v", info)
	}
	h.tick()
	if p := h.info().Pools[0]; p.Warm != 2 || p.Refilling != 0 || len(h.rt.Boxes()) != 2 {
		t.Fatalf("after filling: %+v, runtime %v", p, h.rt.Boxes())
	}
	if rows := h.list(rootToken, ""); len(rows) != 0 {
		t.Fatalf("warm boxes are listed as claimed: %+v", rows)
	}
	for _, id := range h.rt.Boxes() {
		if !h.rt.KeptReady(id) {
			t.Fatalf("warm box %s is not kept ready for its claim's first exec", id)
		}
	}

	starts := h.rt.Calls(enginetest.OpStart)
	sb := h.claim(tenantA, sandbox.ClaimRequest{Template: "base"})
	if h.rt.Calls(enginetest.OpStart) != starts || !slices.Contains(h.rt.Boxes(), sb.ID) || sb.Start != sandbox.StartWarm {
		t.Fatalf("the claim started a box instead of taking a warm one (start %q)", sb.Start)
	}
	if h.rt.KeptReady(sb.ID) {
		t.Fatal("a claimed box is still kept ready: its mux would never stop when idle")
	}
	if got := h.exec(sb, "echo", "warm"); got.Stdout != "warm\n" {
		t.Fatalf("warm sandbox exec: %+v", got)
	}
	if p := h.info().Pools[0]; p.Warm != 1 {
		t.Fatalf("after a warm claim: %+v", p)
	}
	h.tick()
	if p := h.info().Pools[0]; p.Warm != 2 {
		t.Fatalf("not refilled: %+v", p)
	}
	// A claim of another size starts cold, and says so.
	if cold := h.claim(rootToken, sandbox.ClaimRequest{Size: "medium"}); cold.Start != sandbox.StartCold {
		t.Fatalf("a cold claim says start %q", cold.Start)
	}
	if h.rt.Calls(enginetest.OpStart) != starts+2 {
		t.Fatalf("starts %d, want %d", h.rt.Calls(enginetest.OpStart), starts+2)
	}

	// A failed refill start leaves the pool short and backs off instead of spinning.
	h.claim(rootToken, sandbox.ClaimRequest{})
	h.rt.FailNext(enginetest.OpStart, errors.New("no"))
	before := h.rt.Calls(enginetest.OpStart)
	h.tick()
	h.tick()
	if p := h.info().Pools[0]; p.Warm != 1 || p.Refilling != 0 || h.rt.Calls(enginetest.OpStart) != before+1 {
		t.Fatalf("after a failed start: %+v, %d starts", p, h.rt.Calls(enginetest.OpStart)-before)
	}

	// Dropping the pool destroys its warm boxes and keeps the claimed ones.
	h.must(200, "PUT", "/v1/pools", rootToken, sandbox.PoolsRequest{Pools: []sandbox.PoolSpec{}})
	if n := len(h.rt.Boxes()); n != 3 {
		t.Fatalf("runtime holds %d boxes, want the 3 claimed", n)
	}
	if len(h.info().Pools) != 0 || len(h.records()) != 3 {
		t.Fatalf("pools %+v records %v", h.info().Pools, h.records())
	}
}

// TestPoolShrink: lowering a target destroys the excess warm boxes at once.
func TestPoolShrink(t *testing.T) {
	h := newHarness(t)
	put := func(warm int) {
		h.must(200, "PUT", "/v1/pools", rootToken, sandbox.PoolsRequest{Pools: []sandbox.PoolSpec{{Template: "base", Warm: warm}}})
	}
	put(3)
	h.tick()
	put(1)
	if p := h.info().Pools[0]; p.Warm != 1 || len(h.rt.Boxes()) != 1 {
		t.Fatalf("after shrinking: %+v, runtime %v", p, h.rt.Boxes())
	}
}
