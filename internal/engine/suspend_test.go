package engine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// TestSuspend: stopping a machine-local engine hibernates claimed boxes, discards warm ones, and
// the next engine on the same directory wakes the hibernated box on use.
func TestSuspend(t *testing.T) {
	h := newHarness(t)
	h.must(200, "PUT", "/v1/pools", rootToken, sandbox.PoolsRequest{Pools: []sandbox.PoolSpec{{Template: "base", Size: "small", Warm: 1}}})
	h.tick()
	sb := h.claim(tenantA, sandbox.ClaimRequest{Size: "medium", ClaimRef: "box-1"})
	h.exec(sb, "incr")
	if len(h.rt.Boxes()) != 2 {
		t.Fatalf("runtime boxes %v, want a warm one and a claimed one", h.rt.Boxes())
	}

	if err := h.eng.Suspend(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.rt.BoxState(sb.ID); got != runtime.StateHibernated {
		t.Fatalf("claimed box %s after suspend, want hibernated", got)
	}
	if boxes := h.rt.Boxes(); !slices.Equal(boxes, []string{sb.ID}) {
		t.Fatalf("runtime boxes after suspend %v, want only the claimed one", boxes)
	}

	h.crash()
	if !h.row(sb.ID).Hibernated {
		t.Fatal("restarted engine lost the hibernated flag")
	}
	if got := h.exec(sb, "echo", "back"); got.Stdout != "back\n" {
		t.Fatalf("exec after restart: %+v", got)
	}
	if got := h.rt.BoxState(sb.ID); got != runtime.StateRunning {
		t.Fatalf("box %s after exec, want woken", got)
	}
}
