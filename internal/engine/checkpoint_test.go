package engine_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/enginetest"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// TestCheckpoints: a checkpoint keeps the sandbox running; a claim from it sees its files and
// not later ones; listing is newest first; delete is 204 then 404.
func TestCheckpoints(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(tenantA, sandbox.ClaimRequest{Size: "medium"})
	h.exec(sb, "write", "/root/notes", "v1")
	h.exec(sb, "incr")

	take := func(name string) sandbox.Checkpoint {
		t.Helper()
		return decodeAs[sandbox.CheckpointResponse](t, h.must(200, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", tenantA,
			sandbox.CheckpointRequest{Token: sb.Token, Name: name})).Checkpoint
	}
	first := take("first")
	if !strings.HasPrefix(first.ID, "ck_") || first.SandboxID != sb.ID || first.Name != "first" ||
		first.Key != (sandbox.PoolKey{Template: "base", Net: "none", Size: "medium"}) || !first.CreatedAt.Equal(h.clock.Now()) {
		t.Fatalf("checkpoint %+v", first)
	}
	if h.row(sb.ID).Hibernated {
		t.Fatal("checkpoint hibernated the sandbox")
	}
	if got := h.exec(sb, "incr"); got.Stdout != "2\n" {
		t.Fatalf("the sandbox did not keep running: %q", got.Stdout)
	}
	h.exec(sb, "write", "/root/notes", "v2")
	h.clock.Advance(time.Second)
	second := take("")

	cks := decodeAs[sandbox.CheckpointList](t, h.must(200, "GET", "/v1/checkpoints", tenantA, nil)).Checkpoints
	if len(cks) != 2 || cks[0].ID != second.ID || cks[1].ID != first.ID {
		t.Fatalf("not newest first: %+v", cks)
	}

	branch := decodeAs[sandbox.ClaimResponse](t, h.must(200, "POST", "/v1/checkpoints/"+first.ID+"/claim", tenantA,
		sandbox.CheckpointClaimRequest{TTLSeconds: 120}))
	if branch.ID == sb.ID || branch.FromCheckpoint != first.ID || !branch.Deadline.Equal(h.clock.Now().Add(120*time.Second)) {
		t.Fatalf("claim from checkpoint %+v", branch)
	}
	if got := h.exec(branch, "cat", "/root/notes"); got.Stdout != "v1" {
		t.Fatalf("branch sees %q, want the checkpoint's v1", got.Stdout)
	}
	if got := h.exec(sb, "cat", "/root/notes"); got.Stdout != "v2" {
		t.Fatalf("source sees %q", got.Stdout)
	}
	if rows := h.list(tenantA, ""); len(rows) != 2 {
		t.Fatalf("tenant lists %+v", rows)
	}

	// The root token may checkpoint without the sandbox's token; a wrong token is 404.
	h.must(200, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", rootToken, sandbox.CheckpointRequest{})
	h.must(404, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", tenantA, sandbox.CheckpointRequest{Token: branch.Token})

	// A hibernated sandbox's disk is checkpointed while it sleeps: it stays hibernated, and the
	// checkpoint holds what it had when it went to sleep.
	h.exec(branch, "write", "/root/notes", "asleep")
	h.must(204, "POST", "/v1/sandboxes/"+branch.ID+"/hibernate", branch.Token, nil)
	wakes := h.rt.Calls(enginetest.OpWake)
	sleeping := decodeAs[sandbox.CheckpointResponse](t, h.must(200, "POST", "/v1/sandboxes/"+branch.ID+"/checkpoint", tenantA,
		sandbox.CheckpointRequest{Token: branch.Token})).Checkpoint
	if !h.row(branch.ID).Hibernated || h.rt.Calls(enginetest.OpWake) != wakes {
		t.Fatal("a checkpoint woke the hibernated sandbox")
	}
	fromSleep := decodeAs[sandbox.ClaimResponse](t, h.must(200, "POST", "/v1/checkpoints/"+sleeping.ID+"/claim", tenantA, nil))
	if got := h.exec(fromSleep, "cat", "/root/notes"); got.Stdout != "asleep" {
		t.Fatalf("claim from a sleeping box's checkpoint sees %q", got.Stdout)
	}

	h.must(204, "DELETE", "/v1/checkpoints/"+first.ID, tenantA, nil)
	h.must(404, "DELETE", "/v1/checkpoints/"+first.ID, tenantA, nil)
	h.must(404, "POST", "/v1/checkpoints/"+first.ID+"/claim", tenantA, nil)
	h.must(404, "DELETE", "/v1/checkpoints/nonsense", tenantA, nil)
	// A checkpoint outlives its sandbox.
	h.must(204, "POST", "/v1/sandboxes/"+sb.ID+"/release", sb.Token, nil)
	again := decodeAs[sandbox.ClaimResponse](t, h.must(200, "POST", "/v1/checkpoints/"+second.ID+"/claim", tenantA, nil))
	if got := h.exec(again, "cat", "/root/notes"); got.Stdout != "v2" {
		t.Fatalf("claim from the second checkpoint sees %q", got.Stdout)
	}

	// A seeded claim whose start fails leaves no copied disk behind.
	h.rt.FailNext(enginetest.OpStart, errors.New("no"))
	before := h.state()
	h.must(503, "POST", "/v1/checkpoints/"+second.ID+"/claim", tenantA, nil)
	h.unchanged(before, "a failed claim from a checkpoint")
	dirs, _ := os.ReadDir(filepath.Join(h.dir, "boxes"))
	if len(dirs) != len(h.rt.Boxes()) {
		t.Fatalf("box directories %d, boxes %d", len(dirs), len(h.rt.Boxes()))
	}
}

// TestBoxDisk: a box's disk is its size's unless the engine sets one for every box; a claim
// from a checkpoint whose files do not fit in the new box's disk is 413, naming the disk, and
// leaves nothing behind.
func TestBoxDisk(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(tenantA, sandbox.ClaimRequest{Size: "medium"})
	st := decodeAs[sandbox.Stats](t, h.must(200, "GET", "/v1/sandboxes/"+sb.ID+"/stats", rootToken, nil))
	if st.DiskTotalBytes != 20<<30 {
		t.Fatalf("a medium box's disk is %d bytes, want 20 GiB", st.DiskTotalBytes)
	}

	h = newHarness(t, func(o *engine.Options) { o.BoxDiskMB = 16 })
	sb = h.claim(tenantA, sandbox.ClaimRequest{Size: "medium"})
	st = decodeAs[sandbox.Stats](t, h.must(200, "GET", "/v1/sandboxes/"+sb.ID+"/stats", rootToken, nil))
	if st.DiskTotalBytes != 16<<20 {
		t.Fatalf("with a 16 MiB box disk, the box's disk is %d bytes", st.DiskTotalBytes)
	}
	// The fake's disk is a host directory: put 17 MiB in it, as the box would.
	big := filepath.Join(h.dir, "boxes", sb.ID, "disk", "root", "big")
	if err := os.WriteFile(big, make([]byte, 17<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	ck := decodeAs[sandbox.CheckpointResponse](t, h.must(200, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", tenantA,
		sandbox.CheckpointRequest{Token: sb.Token})).Checkpoint
	before := len(h.rt.Boxes())
	body := h.must(413, "POST", "/v1/checkpoints/"+ck.ID+"/claim", tenantA, sandbox.CheckpointClaimRequest{})
	if !strings.Contains(string(body), "disk of 16 MiB") {
		t.Errorf("the refusal does not name the disk: %s", body)
	}
	if got := len(h.rt.Boxes()); got != before {
		t.Errorf("a refused claim left %d boxes, want %d", got, before)
	}
	if rows := h.list(tenantA, ""); len(rows) != 1 {
		t.Errorf("a refused claim left sandboxes: %+v", rows)
	}
	if dirs, err := os.ReadDir(filepath.Join(h.dir, "boxes")); err != nil || len(dirs) != 1 {
		t.Errorf("a refused claim left box directories: %v, %v", dirs, err)
	}
}

// TestExecWaitsForCheckpointPause: a command asked for while a checkpoint has the running box
// paused for its copy waits for the thaw instead of failing (a paused box cannot start one).
func TestExecWaitsForCheckpointPause(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(tenantA, sandbox.ClaimRequest{})
	h.rt.Delay(enginetest.OpSnapshot, 300*time.Millisecond)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		h.must(200, "POST", "/v1/sandboxes/"+sb.ID+"/checkpoint", tenantA, sandbox.CheckpointRequest{Token: sb.Token})
	}()
	for h.rt.Calls(enginetest.OpSnapshot) == 0 {
		time.Sleep(time.Millisecond)
	}
	paused := time.Now() // the copy (300 ms in the fake) is under way
	if got := h.exec(sb, "echo", "after"); got.Stdout != "after\n" {
		t.Fatalf("exec during a checkpoint: %+v", got)
	}
	// The exec waited for the copy to end: it cannot have answered sooner than the copy takes.
	// (A lower bound: a loaded machine only makes the wait longer.)
	if waited := time.Since(paused); waited < 250*time.Millisecond {
		t.Fatalf("the exec answered %v into a 300 ms checkpoint pause: it did not wait for the thaw", waited)
	}
	<-copied
}
