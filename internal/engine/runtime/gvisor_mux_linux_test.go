package runtime

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

// relayProcs counts the relay processes in box id by kind ("mux", "init", "tcp"), from an exec.
func (e *testEnv) relayProcs(t *testing.T, id string) map[string]int {
	t.Helper()
	out := e.sh(t, id, "ps -eo args")
	n := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "/usr/local/sbin/cocoonbox-init relay "); ok {
			n[strings.Fields(rest)[0]]++
		}
	}
	return n
}

// runningMux is the relay mux the engine holds for box id, nil when none runs.
func runningMux(t *testing.T, rt Runtime, id string) *boxMux {
	t.Helper()
	b, err := rt.(*gvisor).box(id)
	if err != nil {
		t.Fatal(err)
	}
	b.muxMu.Lock()
	defer b.muxMu.Unlock()
	if b.mux == nil || b.mux.sess.IsClosed() {
		return nil
	}
	return b.mux
}

// TestGVisorRelayMux: the execs of a running box share one relay process in it (the mux) instead
// of a runsc exec each; a mux that dies is replaced by the next exec, a hibernate stops it (it
// holds a host socket) and the exec after the wake starts another, and a mux left idle stops.
func TestGVisorRelayMux(t *testing.T) {
	defer func(d time.Duration) { muxIdle = d }(muxIdle)
	muxIdle = 600 * time.Millisecond
	e := newTestEnv(t, NameGVisor)
	b := e.start(t, e.spec())
	for range 10 {
		e.sh(t, b.ID, "true")
	}
	if n := e.relayProcs(t, b.ID); n["mux"] != 1 || n["init"] != 0 {
		t.Fatalf("relay processes after 11 execs: %v, want one mux and no other", n)
	}

	// The exec that kills the mux dies with it; the next one starts another.
	first := runningMux(t, e.rt, b.ID)
	_, _, _, _ = e.exec(b.ID, "sh", "-c", "kill -9 $(pgrep -f '^/usr/local/sbin/cocoonbox-init relay mux$')")
	if n := e.relayProcs(t, b.ID); n["mux"] != 1 {
		t.Fatalf("relay processes after the mux was killed: %v, want a new mux", n)
	}
	if m := runningMux(t, e.rt, b.ID); m == nil || m == first {
		t.Fatal("the exec after the mux was killed did not start another")
	}

	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()
	if err := e.rt.Hibernate(ctx, b.ID); err != nil {
		t.Fatalf("hibernate with the mux running: %v", err)
	}
	if runningMux(t, e.rt, b.ID) != nil {
		t.Fatal("the mux outlived the hibernate")
	}
	if err := e.rt.Wake(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if n := e.relayProcs(t, b.ID); n["mux"] != 1 {
		t.Fatalf("relay processes after the wake: %v, want one mux", n)
	}
	testutil.Eventually(t, testutil.WaitShort, "the idle mux to stop", func() bool { return runningMux(t, e.rt, b.ID) == nil })

	// A box kept ready (a warm one) gets a mux now, and keeps it however idle until let go.
	e.rt.(ReadyKeeper).KeepReady(b.ID, true)
	kept := runningMux(t, e.rt, b.ID)
	if kept == nil {
		t.Fatal("KeepReady started no mux")
	}
	time.Sleep(3 * muxIdle)
	if runningMux(t, e.rt, b.ID) != kept {
		t.Fatal("the mux of a box kept ready stopped when idle")
	}
	e.rt.(ReadyKeeper).KeepReady(b.ID, false)
	testutil.Eventually(t, testutil.WaitShort, "the mux let go to stop", func() bool { return runningMux(t, e.rt, b.ID) == nil })
}

// TestGVisorRelayWithoutMux: a box whose init has no relay mux (an image older than it) is
// reached through a relay process per exec, as before the mux.
func TestGVisorRelayWithoutMux(t *testing.T) {
	defer func(m string) { muxMode = m }(muxMode)
	muxMode = "no-such-mode" // the init answers with its usage, as an older init answers "mux"
	e := newTestEnv(t, NameGVisor)
	b := e.start(t, e.spec())
	if out := e.sh(t, b.ID, "echo hi"); out != "hi\n" {
		t.Fatalf("exec without the mux: %q", out)
	}
	if n := e.relayProcs(t, b.ID); n["mux"] != 0 || n["init"] != 1 {
		t.Fatalf("relay processes during an exec without the mux: %v, want its own relay only", n)
	}
	if runningMux(t, e.rt, b.ID) != nil {
		t.Fatal("a mux runs in a box whose init has none")
	}
}

// TestGVisorCredentialByInit: `cocoonbox-init credential PATH`, every sandbox's readiness probe,
// is run by the box's init itself (a process costs most of an exec under gVisor): it writes the
// file 0600 and replaces it whole, and answers even with a cwd that does not exist, which a
// spawned command is refused.
func TestGVisorCredentialByInit(t *testing.T) {
	e := newTestEnv(t, NameGVisor)
	b := e.start(t, e.spec())
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitShort)
	defer cancel()
	for _, cred := range []string{"first", "second"} {
		code, err := e.rt.Exec(ctx, b.ID, ExecRequest{
			Argv: []string{"/usr/local/sbin/cocoonbox-init", "credential", "/run/cocoonbox/test-credential"},
			Env:  []string{"COCOONBOX_CRED=" + cred}, Cwd: "/nonexistent",
		})
		if err != nil || code != 0 {
			t.Fatalf("credential %s: exit %d, %v", cred, code, err)
		}
		if got := e.sh(t, b.ID, "stat -c %a /run/cocoonbox/test-credential; cat /run/cocoonbox/test-credential"); got != "600\n"+cred {
			t.Fatalf("after credential %s: %q", cred, got)
		}
	}
}
