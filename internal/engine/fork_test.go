package engine_test

import (
	"io"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// TestCheckpointWithMemory: a checkpoint with memory (a fork's) ends the box's relays as a
// hibernate does, the box goes on, and sandboxes claimed from it go on from the counter it had;
// one without memory is the disk alone, as before.
func TestCheckpointWithMemory(t *testing.T) {
	h := newHarness(t)
	if !h.info().Capabilities.CheckpointMemory {
		t.Fatal("info says the engine cannot checkpoint memory")
	}
	if err := h.rt.ServePort(7, echo); err != nil {
		t.Fatal(err)
	}
	sb := h.claim(tenantA, sandbox.ClaimRequest{})
	h.exec(sb, "incr")
	h.exec(sb, "incr")
	viewer := dialRelay(t, h, sb.ID, 7, sb.Token)
	defer viewer.Close()
	roundTrip(t, viewer, "watching")

	ck := decodeAs[sandbox.CheckpointResponse](t, h.must(200, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", tenantA,
		sandbox.CheckpointRequest{Token: sb.Token, Name: "fork:one", Memory: true})).Checkpoint
	if !ck.Memory {
		t.Fatalf("checkpoint %+v does not hold memory", ck)
	}
	if _, err := io.ReadAll(viewer); err != nil {
		t.Fatalf("the relay open during the checkpoint: %v", err)
	}
	if got := h.exec(sb, "incr"); got.Stdout != "3\n" {
		t.Fatalf("the source goes on at %q, want 3", got.Stdout)
	}
	for range 2 {
		fork := decodeAs[sandbox.ClaimResponse](t, h.must(200, "POST", "/v1/checkpoints/"+ck.ID+"/claim", tenantA, nil))
		if got := h.exec(fork, "incr"); got.Stdout != "3\n" {
			t.Fatalf("a fork goes on at %q, want 3 (from the checkpoint's 2)", got.Stdout)
		}
	}
	disk := decodeAs[sandbox.CheckpointResponse](t, h.must(200, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", tenantA,
		sandbox.CheckpointRequest{Token: sb.Token})).Checkpoint
	branch := decodeAs[sandbox.ClaimResponse](t, h.must(200, "POST", "/v1/checkpoints/"+disk.ID+"/claim", tenantA, nil))
	if disk.Memory || h.exec(branch, "incr").Stdout != "1\n" {
		t.Fatal("a checkpoint without memory brought the counter along")
	}
}

// TestCheckpointMemoryRefused: an engine whose runtime cannot save memory says so in its info
// and refuses a checkpoint that asks for it, naming the field, taking nothing.
func TestCheckpointMemoryRefused(t *testing.T) {
	h := newHarness(t, func(o *engine.Options) { o.Runtime = struct{ runtime.Runtime }{o.Runtime} })
	if h.info().Capabilities.CheckpointMemory {
		t.Fatal("info says a runtime without memory checkpoints has them")
	}
	sb := h.claim(tenantA, sandbox.ClaimRequest{})
	body := h.must(400, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", tenantA, sandbox.CheckpointRequest{Token: sb.Token, Memory: true})
	if !strings.Contains(string(body), "memory: the") {
		t.Fatalf("refusal %s does not name the field", body)
	}
	if cks := decodeAs[sandbox.CheckpointList](t, h.must(200, "GET", "/v1/checkpoints", tenantA, nil)).Checkpoints; len(cks) != 0 {
		t.Fatalf("a refused checkpoint left %+v", cks)
	}
}
