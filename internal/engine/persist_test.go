package engine_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/enginetest"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// TestCrashRestart kills the engine (no Close, as SIGKILL) and starts a new one on the same
// directory and runtime: running boxes keep running with their memory, hibernated ones still
// wake, leases still expire, warm boxes return to their pool, checkpoints stay, a box the
// runtime lost is dropped, a stopped one restarts on its disk, a half-started one is destroyed.
func TestCrashRestart(t *testing.T) {
	h := newHarness(t)
	h.must(200, "PUT", "/v1/pools", rootToken, sandbox.PoolsRequest{Pools: []sandbox.PoolSpec{{Template: "desktop", Warm: 1}}})
	h.tick()
	running := h.claim(tenantA, sandbox.ClaimRequest{ClaimRef: "r", TTLSeconds: 3600})
	sleeping := h.claim(tenantA, sandbox.ClaimRequest{TTLSeconds: 3600})
	shortLease := h.claim(rootToken, sandbox.ClaimRequest{TTLSeconds: 60})
	lost := h.claim(rootToken, sandbox.ClaimRequest{TTLSeconds: 3600})
	stopped := h.claim(rootToken, sandbox.ClaimRequest{TTLSeconds: 3600})
	h.exec(running, "incr")
	h.exec(sleeping, "write", "/root/f", "kept")
	h.exec(stopped, "write", "/root/f", "on disk")
	h.exec(stopped, "incr")
	h.must(204, "POST", "/v1/sandboxes/"+sleeping.ID+"/hibernate", sleeping.Token, nil)
	ck := decodeAs[sandbox.CheckpointResponse](t, h.must(200, "POST", "/v1/sandboxes/"+running.ID+"/checkpoint", tenantA,
		sandbox.CheckpointRequest{Token: running.Token})).Checkpoint

	// Records hold tokens: owner-only.
	for _, name := range h.records() {
		fi, err := os.Stat(filepath.Join(h.dir, "records", name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("record %s mode %v %v", name, fi.Mode(), err)
		}
		data, _ := os.ReadFile(filepath.Join(h.dir, "records", name))
		if strings.Contains(string(data), tenantA) || strings.Contains(string(data), rootToken) {
			t.Fatalf("record %s holds a node token", name)
		}
	}

	// A box whose start was cut short by the crash: record pending, box half-made.
	halfID := "sb_00000000000000aa"
	half, _ := json.Marshal(map[string]any{"version": 1, "id": halfID, "key": map[string]string{"template": "base", "net": "none", "size": "small"}, "pending": true})
	if err := os.WriteFile(filepath.Join(h.dir, "records", halfID+".json"), half, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Start(context.Background(), runtime.Spec{ID: halfID, Dir: filepath.Join(h.dir, "boxes", halfID), Rootfs: h.rootfs, VCPUs: 1, MemoryMB: 512, DiskMB: 1024}); err != nil {
		t.Fatal(err)
	}
	// A box directory no record names.
	if err := os.MkdirAll(filepath.Join(h.dir, "boxes", "sb_00000000000000bb", "disk"), 0o700); err != nil {
		t.Fatal(err)
	}
	h.rt.Vanish(lost.ID)
	h.rt.Stop(stopped.ID)
	starts := h.rt.Calls(enginetest.OpStart)

	h.crash()

	if got := h.exec(running, "incr"); got.Stdout != "2\n" {
		t.Fatalf("running box after restart: %q, want its counter to continue", got.Stdout)
	}
	rows := h.list(tenantA, "?claim_ref=r")
	if len(rows) != 1 || rows[0].ID != running.ID {
		t.Fatalf("claim_ref after restart: %+v", rows)
	}
	if !h.row(sleeping.ID).Hibernated {
		t.Fatal("hibernated box not hibernated after restart")
	}
	if got := h.exec(sleeping, "cat", "/root/f"); got.Stdout != "kept" {
		t.Fatalf("hibernated box after restart: %+v", got)
	}
	h.must(404, "POST", "/v1/sandboxes/"+lost.ID+"/wake", lost.Token, nil)
	if !h.row(stopped.ID).Hibernated {
		t.Fatal("a stopped box must read as hibernated until it is woken")
	}
	if got := h.exec(stopped, "cat", "/root/f"); got.Stdout != "on disk" {
		t.Fatalf("stopped box lost its disk: %+v", got)
	}
	if got := h.exec(stopped, "incr"); got.Stdout != "1\n" {
		t.Fatalf("stopped box kept memory it cannot have: %q", got.Stdout)
	}
	if p := h.info().Pools; len(p) != 1 || p[0].Warm != 1 {
		t.Fatalf("pool after restart: %+v", p)
	}
	h.tick()
	// Only the stopped box's restart started anything: the warm box was adopted, not replaced.
	if n := h.rt.Calls(enginetest.OpStart) - starts; n != 1 {
		t.Fatalf("%d starts after restart, want 1", n)
	}
	if cks := decodeAs[sandbox.CheckpointList](t, h.must(200, "GET", "/v1/checkpoints", tenantA, nil)); len(cks.Checkpoints) != 1 || cks.Checkpoints[0].ID != ck.ID {
		t.Fatalf("checkpoints after restart: %+v", cks)
	}
	if slices.Contains(h.rt.Boxes(), halfID) || slices.Contains(h.records(), halfID+".json") {
		t.Fatal("the half-started box survived the restart")
	}
	if _, err := os.Stat(filepath.Join(h.dir, "boxes", "sb_00000000000000bb")); !os.IsNotExist(err) {
		t.Fatal("an orphan box directory survived the restart")
	}
	if j := h.journal(); !slices.Contains(j, "release "+lost.ID+" lost") {
		t.Fatalf("journal lacks the lost box: %q", j)
	}

	// Leases still expire.
	h.clock.Advance(61 * time.Second)
	h.tick()
	if slices.Contains(h.rt.Boxes(), shortLease.ID) {
		t.Fatal("the short lease was not reaped after restart")
	}

	// A second crash keeps all of it again.
	h.crash()
	if got := h.exec(running, "incr"); got.Stdout != "3\n" {
		t.Fatalf("after a second restart: %q", got.Stdout)
	}
}

// TestClockJumpKeepsBoxes: the wall clock jumps three hours ahead, past every lease, while the
// engine is down (or a restart comes long after the last renewal): no box is reaped at once.
// Each is kept for engine.AdoptGrace, so the owner, whose timers the jump fires too, renews it and it
// keeps its files; a box nobody renews is reaped when the grace runs out.
func TestClockJumpKeepsBoxes(t *testing.T) {
	h := newHarness(t)
	kept := h.claim(tenantA, sandbox.ClaimRequest{TTLSeconds: 3600})
	abandoned := h.claim(tenantA, sandbox.ClaimRequest{TTLSeconds: 3600})
	h.exec(kept, "write", "/root/f", "work")

	h.clock.Advance(3 * time.Hour) // no reaper pass in between: the engine is down
	h.crash()
	h.tick()
	for _, sb := range []sandbox.ClaimResponse{kept, abandoned} {
		if !slices.Contains(h.rt.Boxes(), sb.ID) {
			t.Fatalf("box %s was reaped by the first pass after the jump", sb.ID)
		}
	}
	if d := h.row(kept.ID).Deadline; !d.After(h.clock.Now()) {
		t.Fatalf("the adopted box's deadline %v is not after now, %v", d, h.clock.Now())
	}
	h.must(200, "POST", "/v1/sandboxes/"+kept.ID+"/renew", kept.Token, sandbox.RenewRequest{TTLSeconds: 3600})

	h.clock.Advance(engine.AdoptGrace + time.Second)
	h.tick()
	if slices.Contains(h.rt.Boxes(), abandoned.ID) {
		t.Fatal("a box nobody renewed outlived the grace")
	}
	if got := h.exec(kept, "cat", "/root/f"); got.Stdout != "work" {
		t.Fatalf("the renewed box after the jump: %+v", got)
	}
}

// TestRecordsSurviveCorruption: an unreadable record is skipped and kept (it may hold the only
// copy of a token); a temporary file left by a cut-short write is removed.
func TestRecordsSurviveCorruption(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	if err := os.WriteFile(filepath.Join(h.dir, "records", "sb_00000000000000cc.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, "records", ".sb_x.json.tmp123"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.crash()
	if got := h.exec(sb, "echo", "ok"); got.Stdout != "ok\n" {
		t.Fatalf("after restart with a corrupt neighbour: %+v", got)
	}
	if !slices.Contains(h.records(), "sb_00000000000000cc.json") {
		t.Fatal("an unreadable record was deleted; it may hold the only copy of a token")
	}
	if slices.Contains(h.records(), ".sb_x.json.tmp123") {
		t.Fatal("a temporary file of a cut-short write was kept")
	}
}

// TestNewNeedsItsParts: New names what is missing.
func TestNewNeedsItsParts(t *testing.T) {
	if _, err := engine.New(engine.Options{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "required") {
		t.Fatalf("New without a runtime: %v", err)
	}
}

// TestRuntimeSwitchRefused: boxes started by one runtime are never adopted by another (a
// gVisor box would read as stopped under the process runtime and be started twice on one
// disk); an empty directory may switch.
func TestRuntimeSwitchRefused(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	other := h.opts
	other.Runtime = enginetest.NewWith("process", runtime.Capabilities{Isolation: runtime.IsolationNone})
	other.TenantTokens = nil // an unsandboxed runtime serves one user
	if _, err := engine.New(other); err == nil || !strings.Contains(err.Error(), "--runtime fake") {
		t.Fatalf("New with another runtime over live boxes: %v", err)
	}
	h.must(204, "POST", "/v1/sandboxes/"+sb.ID+"/release", sb.Token, nil)
	e, err := engine.New(other)
	if err != nil {
		t.Fatalf("New with another runtime over an empty dir: %v", err)
	}
	_ = e.Close()
}
