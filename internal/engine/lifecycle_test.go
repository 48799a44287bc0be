package engine_test

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/enginetest"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// TestLifecycle walks one sandbox through the contract: claim, exec, hibernate (memory kept),
// wake, renew, release — then 404 on every verb.
func TestLifecycle(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(tenantA, sandbox.ClaimRequest{Size: "large", ClaimRef: "box-1", TTLSeconds: 600})
	if !strings.HasPrefix(sb.ID, "sb_") || len(sb.ID) != 19 || len(sb.Token) != 32 || sb.OwnerAddr != "127.0.0.1:7777" {
		t.Fatalf("claim response %+v", sb)
	}
	if want := h.clock.Now().Add(600 * time.Second); !sb.Deadline.Equal(want) {
		t.Fatalf("deadline %v, want %v", sb.Deadline, want)
	}
	rows := h.list(tenantA, "?claim_ref=box-1")
	if len(rows) != 1 || rows[0].ID != sb.ID || rows[0].Key != (sandbox.PoolKey{Template: "base", Net: "none", Size: "large"}) || rows[0].Hibernated {
		t.Fatalf("list by claim_ref: %+v", rows)
	}
	huge := decodeAs[sandbox.ExecResult](t, h.must(200, "POST", "/v1/sandboxes/"+sb.ID+"/exec", sb.Token,
		sandbox.ExecRequest{Argv: []string{"echo", "patient"}, TimeoutSeconds: 1 << 62}))
	if huge.Stdout != "patient\n" {
		t.Fatalf("exec with a huge timeout: %+v", huge)
	}
	if got := h.exec(sb, "echo", "hello"); got.ExitCode != 0 || got.Stdout != "hello\n" {
		t.Fatalf("echo: %+v", got)
	}
	if got := h.exec(sb, "false"); got.ExitCode != 1 {
		t.Fatalf("false: %+v", got)
	}
	env := decodeAs[sandbox.ExecResult](t, h.must(200, "POST", "/v1/sandboxes/"+sb.ID+"/exec", sb.Token,
		sandbox.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"B": "2", "A": "1"}, Cwd: "/root"}))
	if env.Stdout != "A=1\nB=2\n" {
		t.Fatalf("env: %q", env.Stdout)
	}
	h.exec(sb, "incr")

	path := "/v1/sandboxes/" + sb.ID
	h.must(204, "POST", path+"/hibernate", sb.Token, nil)
	h.must(204, "POST", path+"/hibernate", sb.Token, nil) // already hibernated: still 204
	if h.rt.BoxState(sb.ID) != runtime.StateHibernated || !h.row(sb.ID).Hibernated {
		t.Fatal("not hibernated")
	}
	st := decodeAs[sandbox.Stats](t, h.must(200, "GET", path+"/stats", rootToken, nil))
	if !st.Hibernated || st.MemUsedMeasured || st.CPUCount != 4 || st.MemTotalBytes != 4<<30 {
		t.Fatalf("stats while hibernated: %+v", st)
	}
	h.must(204, "POST", path+"/wake", sb.Token, nil)
	h.must(204, "POST", path+"/wake", sb.Token, nil) // already running: still 204
	if got := h.exec(sb, "incr"); got.Stdout != "2\n" {
		t.Fatalf("memory after hibernate/wake: %q, want the counter to continue at 2", got.Stdout)
	}

	// Renew: 0 is the default, above a day is clamped; the granted deadline comes back.
	for _, tc := range []struct {
		ttl  int
		want time.Duration
	}{{0, 300 * time.Second}, {100000, 86400 * time.Second}, {10_000_000_000, 86400 * time.Second}, {42, 42 * time.Second}} {
		got := decodeAs[sandbox.RenewResponse](t, h.must(200, "POST", path+"/renew", sb.Token, sandbox.RenewRequest{TTLSeconds: tc.ttl}))
		if want := h.clock.Now().Add(tc.want); !got.Deadline.Equal(want) || !h.row(sb.ID).Deadline.Equal(want) {
			t.Fatalf("renew %d: deadline %v, want %v", tc.ttl, got.Deadline, want)
		}
	}
	h.must(200, "POST", path+"/renew", sb.Token, nil) // no body: the default

	h.must(204, "POST", path+"/release", sb.Token, nil)
	if slices.Contains(h.rt.Boxes(), sb.ID) {
		t.Fatal("box still in the runtime after release")
	}
	for _, v := range []struct{ method, suffix, token string }{
		{"POST", "/release", sb.Token}, {"POST", "/release", rootToken}, {"POST", "/hibernate", sb.Token},
		{"POST", "/wake", sb.Token}, {"POST", "/renew", sb.Token}, {"POST", "/exec", sb.Token},
		{"GET", "", rootToken}, {"GET", "/stats", rootToken},
	} {
		var body any
		if v.suffix == "/exec" {
			body = sandbox.ExecRequest{Argv: []string{"echo"}}
		}
		if code, data, _ := h.call(v.method, path+v.suffix, v.token, body); code != 404 {
			t.Fatalf("%s%s after release: %d %s", v.method, v.suffix, code, data)
		}
	}
	if code := relayStatus(t, h, sb.ID, 7, sb.Token); code != 404 {
		t.Fatalf("relay after release: %d", code)
	}
	want := []string{"claim " + sb.ID, "hibernate " + sb.ID + " request", "wake " + sb.ID + " request", "release " + sb.ID + " request"}
	if got := h.journal(); !slices.Equal(got, want) {
		t.Fatalf("journal %q, want %q", got, want)
	}
	if len(h.records()) != 0 {
		t.Fatalf("records left: %v", h.records())
	}
}

// TestExecLimits: output over 8 MiB is 413 and a timeout is 504, each with the child killed;
// a hibernated sandbox is woken for an exec.
func TestExecLimits(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	path := "/v1/sandboxes/" + sb.ID + "/exec"

	code, data, _ := h.call("POST", path, sb.Token, sandbox.ExecRequest{Argv: []string{"yes", strconv.Itoa(9 << 20)}})
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(errorOf(t, data), "8 MiB") {
		t.Fatalf("over the cap: %d %s", code, data)
	}
	got := h.exec(sb, "yes", strconv.Itoa(8<<20)) // exactly the cap is fine
	if len(got.Stdout) != 8<<20 {
		t.Fatalf("at the cap: %d bytes", len(got.Stdout))
	}

	start := time.Now()
	code, data, _ = h.call("POST", path, sb.Token, sandbox.ExecRequest{Argv: []string{"sleep", "30"}, TimeoutSeconds: 1})
	if code != http.StatusGatewayTimeout || !strings.Contains(errorOf(t, data), "timed out") {
		t.Fatalf("timeout: %d %s", code, data)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("timeout took %v", took)
	}
	if n := h.rt.RunningExecs(); n != 0 {
		t.Fatalf("%d commands still running after timeout", n)
	}

	h.must(204, "POST", "/v1/sandboxes/"+sb.ID+"/hibernate", sb.Token, nil)
	wakes := h.rt.Calls(enginetest.OpWake)
	if got := h.exec(sb, "echo", "awake"); got.Stdout != "awake\n" {
		t.Fatalf("exec on hibernated: %+v", got)
	}
	if h.rt.Calls(enginetest.OpWake) != wakes+1 || h.row(sb.ID).Hibernated {
		t.Fatal("exec did not wake the sandbox")
	}
	if j := h.journal(); j[len(j)-1] != "wake "+sb.ID+" exec" {
		t.Fatalf("journal tail %q", j[len(j)-1])
	}
}

// TestHibernateEndsRunningExec: a hibernate does not wait for (or checkpoint under) a running
// command; the command is killed and answers 409.
func TestHibernateEndsRunningExec(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	done := make(chan int)
	go func() {
		code, _, _ := h.call("POST", "/v1/sandboxes/"+sb.ID+"/exec", sb.Token, sandbox.ExecRequest{Argv: []string{"sleep", "30"}})
		done <- code
	}()
	testutil.Eventually(t, testutil.WaitShort, "the command to run", func() bool { return h.rt.RunningExecs() == 1 })
	h.must(204, "POST", "/v1/sandboxes/"+sb.ID+"/hibernate", sb.Token, nil)
	if code := <-done; code != http.StatusConflict {
		t.Fatalf("preempted exec: %d, want 409", code)
	}
	if h.rt.BoxState(sb.ID) != runtime.StateHibernated {
		t.Fatal("not hibernated")
	}
}

// TestConcurrentUse runs execs, hibernates, wakes and renews on one sandbox at once: every
// answer is one the contract allows and the engine ends consistent with the runtime.
func TestConcurrentUse(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	path := "/v1/sandboxes/" + sb.ID
	var wg sync.WaitGroup
	bad := make(chan string, 100)
	for i := range 8 {
		wg.Go(func() {
			for range 5 {
				var code int
				var data []byte
				switch i % 4 {
				case 0, 1:
					code, data, _ = h.call("POST", path+"/exec", sb.Token, sandbox.ExecRequest{Argv: []string{"echo", "x"}})
					if code != 200 && code != 409 {
						bad <- "exec " + strconv.Itoa(code) + string(data)
					}
				case 2:
					if code, data, _ = h.call("POST", path+"/hibernate", sb.Token, nil); code != 204 {
						bad <- "hibernate " + strconv.Itoa(code) + string(data)
					}
				case 3:
					if code, data, _ = h.call("POST", path+"/wake", sb.Token, nil); code != 204 {
						bad <- "wake " + strconv.Itoa(code) + string(data)
					}
				}
			}
		})
	}
	wg.Wait()
	close(bad)
	for b := range bad {
		t.Error(b)
	}
	hib := h.row(sb.ID).Hibernated
	if rs := h.rt.BoxState(sb.ID); hib != (rs == runtime.StateHibernated) {
		t.Fatalf("engine says hibernated=%v, runtime says %s", hib, rs)
	}
}

// TestClaimFailures: a failed start answers 503 with Retry-After and leaves nothing behind; so
// does a template whose image is not built, and a claim beyond MaxSandboxes answers 429 (no
// capacity) with Retry-After.
func TestClaimFailures(t *testing.T) {
	h := newHarness(t, func(o *engine.Options) { o.MaxSandboxes = 1 })
	h.rt.FailNext(enginetest.OpStart, errors.New("runsc: out of cheese"))
	before := h.state()
	code, data, hdr := h.call("POST", "/v1/claim", rootToken, sandbox.ClaimRequest{Template: "base"})
	if code != 503 || hdr.Get("Retry-After") == "" || strings.Contains(errorOf(t, data), "cheese") {
		t.Fatalf("failed start: %d %q %s", code, hdr.Get("Retry-After"), data)
	}
	h.unchanged(before, "a failed start")
	code, data, hdr = h.call("POST", "/v1/claim", rootToken, sandbox.ClaimRequest{Template: "unbuilt"})
	if code != 503 || hdr.Get("Retry-After") == "" || errorOf(t, data) != `template "unbuilt" is not available on this engine now: its image is not built (the operator runs make image)` {
		t.Fatalf("image not built: %d %s", code, data)
	}
	h.unchanged(before, "a claim of an unbuilt image")
	h.claim(rootToken, sandbox.ClaimRequest{})
	code, data, hdr = h.call("POST", "/v1/claim", rootToken, sandbox.ClaimRequest{Template: "base"})
	if code != 429 || hdr.Get("Retry-After") == "" {
		t.Fatalf("over capacity: %d %s", code, data)
	}
}

// TestVanishedBox: a box the runtime lost answers 404 and its record is dropped, which the box
// workflow reads as "claim a new one and restore".
func TestVanishedBox(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	h.rt.Vanish(sb.ID)
	code, data, _ := h.call("POST", "/v1/sandboxes/"+sb.ID+"/exec", sb.Token, sandbox.ExecRequest{Argv: []string{"echo"}})
	if code != 404 || errorOf(t, data) != "unknown sandbox" {
		t.Fatalf("exec on a vanished box: %d %s", code, data)
	}
	if len(h.list(rootToken, "")) != 0 || len(h.records()) != 0 {
		t.Fatal("a vanished box is still listed or recorded")
	}
	if j := h.journal(); j[len(j)-1] != "release "+sb.ID+" lost" {
		t.Fatalf("journal tail %q", j[len(j)-1])
	}
}

// TestInfoIsHonest: /v1/info names the runtime and says whether hibernate keeps memory —
// false for a process-like runtime, whose hibernate really does lose it.
func TestInfoIsHonest(t *testing.T) {
	rt := enginetest.NewWith("process", runtime.Capabilities{MemoryHibernate: false, Isolation: runtime.IsolationNone})
	h := newHarness(t, func(o *engine.Options) { o.Runtime = rt; o.TenantTokens = nil })
	h.rt = rt
	info := h.info()
	if info.Runtime != "process" || info.Capabilities == nil || info.Capabilities.MemoryHibernate ||
		info.Capabilities.AgentRelay || !slices.Equal(info.Capabilities.Lanes, []string{"none"}) || info.MemoryHibernate() ||
		info.Capabilities.Isolation != runtime.IsolationNone {
		t.Fatalf("info %+v caps %+v", info, info.Capabilities)
	}
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	h.exec(sb, "incr")
	h.must(204, "POST", "/v1/sandboxes/"+sb.ID+"/hibernate", sb.Token, nil)
	if got := h.exec(sb, "incr"); got.Stdout != "1\n" {
		t.Fatalf("counter after a memoryless hibernate: %q", got.Stdout)
	}
	if info := h.info(); info.Claimed != 1 || info.Hibernated != 0 {
		t.Fatalf("counts %+v", info)
	}
	h.must(501, "GET", "/v1/sandboxes/"+sb.ID+"/agent", sb.Token, nil)
}

// TestStoppedBox: a box whose processes died under a running engine (a box crash) is
// reconciled with the runtime: the first use answers 503 and the retry starts it again on its
// disk; a hibernated box found stopped at wake is started instead of restored; hibernating a
// stopped box is a no-op.
func TestStoppedBox(t *testing.T) {
	h := newHarness(t)
	crashed := h.claim(rootToken, sandbox.ClaimRequest{})
	h.exec(crashed, "write", "/root/f", "disk")
	h.rt.Stop(crashed.ID)
	code, data, hdr := h.call("POST", "/v1/sandboxes/"+crashed.ID+"/exec", crashed.Token, sandbox.ExecRequest{Argv: []string{"echo"}})
	if code != 503 || hdr.Get("Retry-After") == "" {
		t.Fatalf("first use of a crashed box: %d %s", code, data)
	}
	if !h.row(crashed.ID).Hibernated {
		t.Fatal("a crashed box must read as hibernated until it is started again")
	}
	if got := h.exec(crashed, "cat", "/root/f"); got.Stdout != "disk" {
		t.Fatalf("retry on a crashed box: %+v", got)
	}

	sleeping := h.claim(rootToken, sandbox.ClaimRequest{})
	h.must(204, "POST", "/v1/sandboxes/"+sleeping.ID+"/hibernate", sleeping.Token, nil)
	h.rt.Stop(sleeping.ID)
	starts := h.rt.Calls(enginetest.OpStart)
	if got := h.exec(sleeping, "echo", "up"); got.Stdout != "up\n" || h.rt.Calls(enginetest.OpStart) != starts+1 {
		t.Fatalf("wake of a stopped box: %+v", got)
	}

	h.rt.Stop(sleeping.ID)
	h.must(204, "POST", "/v1/sandboxes/"+sleeping.ID+"/hibernate", sleeping.Token, nil)
	if !h.row(sleeping.ID).Hibernated {
		t.Fatal("hibernate of a stopped box")
	}
}
