package conformance

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// counterScript starts a process that counts in /tmp/count ten times a second, detached so the
// exec that starts it returns at once.
// Each value is written to a temporary file and renamed over /tmp/count, so a reader never sees
// the file truncated between two writes.
const counterScript = `nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv -f /tmp/count.new /tmp/count; sleep 0.1; done' >/dev/null 2>&1 </dev/null &`

// lifecycle is the acceptance path: claim → exec → write a file → start a process →
// hibernate → listed as hibernated → wake → file and process state as documented → renew →
// checkpoint → claim from it sees the file → release → 404 on every verb.
func (s *suite) lifecycle(t *testing.T) {
	t.Parallel()
	ref := s.ref("lifecycle")
	sb := s.claim(t, "lifecycle")
	c := s.h.Root

	if out := s.sh(t, sb.SandboxRef, "echo hello"); out != "hello\n" {
		t.Fatalf("echo: got %q", out)
	}
	s.sh(t, sb.SandboxRef, "echo data > /root/f")
	s.sh(t, sb.SandboxRef, counterScript)
	testutil.EventuallyReports(t, 30*time.Second, "counter reaches 10", func() (bool, string) {
		n := s.readInt(t, sb.SandboxRef, "/tmp/count")
		return n >= 10, fmt.Sprint(n)
	})
	rate := s.countRate(t, sb.SandboxRef)

	before := s.readInt(t, sb.SandboxRef, "/tmp/count")
	hibernating := time.Now()
	if err := c.Hibernate(s.ctx(t), sb.SandboxRef); err != nil {
		t.Fatalf("hibernate: %v", err)
	}
	hibernatedAt := time.Now()
	awake := hibernatedAt.Sub(hibernating) // the counter runs until the checkpoint, and after the wake
	if row, ok := s.row(t, ref, sb.ID); !ok || !row.Hibernated {
		t.Fatalf("after hibernate the listing shows %+v (listed %v), want hibernated", row, ok)
	}
	// Stay hibernated long enough that a counter that kept running would show it.
	time.Sleep(time.Until(hibernatedAt.Add(2 * time.Second)))
	asleep := time.Since(hibernatedAt)
	waking := time.Now()
	if err := c.Wake(s.ctx(t), sb.SandboxRef); err != nil {
		t.Fatalf("wake: %v", err)
	}
	awake += time.Since(waking)
	if row, ok := s.row(t, ref, sb.ID); !ok || row.Hibernated {
		t.Fatalf("after wake the listing shows %+v (listed %v), want running", row, ok)
	}
	if out := s.sh(t, sb.SandboxRef, "cat /root/f"); out != "data\n" {
		t.Fatalf("file after wake: got %q, want %q", out, "data\n")
	}
	s.checkCounterAfterWake(t, sb.SandboxRef, before, rate, asleep, awake)

	row, _ := s.row(t, ref, sb.ID)
	granted, err := c.Renew(s.ctx(t), sb.SandboxRef, 10*time.Minute)
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	if !granted.After(row.Deadline) || granted.Sub(time.Now().Add(10*time.Minute)).Abs() > time.Minute {
		t.Fatalf("renew 10m: granted %v, was %v, now %v", granted, row.Deadline, time.Now())
	}
	if row, _ := s.row(t, ref, sb.ID); row.Deadline.Sub(granted).Abs() > time.Second {
		t.Fatalf("renew: listing deadline %v, granted %v", row.Deadline, granted)
	}

	ck, err := c.Checkpoint(s.ctx(t), sb.SandboxRef, "conformance-"+s.run)
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if !strings.HasPrefix(ck.ID, "ck_") || ck.SandboxID != sb.ID {
		t.Fatalf("checkpoint: got %+v, want ck_… of %s", ck, sb.ID)
	}
	if !s.checkpointListed(t, ck.ID) {
		t.Fatalf("checkpoint %s is not listed", ck.ID)
	}
	clone, err := c.ClaimFromCheckpoint(s.ctx(t), ck.ID, 0, "")
	if err != nil {
		t.Fatalf("claim from checkpoint: %v", err)
	}
	s.releaseAtEnd(t, clone.SandboxRef)
	if clone.ID == sb.ID {
		t.Fatalf("claim from checkpoint returned the source sandbox %s", sb.ID)
	}
	if out := s.sh(t, clone.SandboxRef, "cat /root/f"); out != "data\n" {
		t.Fatalf("file in the sandbox claimed from the checkpoint: got %q", out)
	}
	if out := s.sh(t, sb.SandboxRef, "cat /root/f"); out != "data\n" {
		t.Fatalf("the source sandbox after checkpoint: got %q", out) // it keeps running
	}
	if err := c.Release(s.ctx(t), clone.SandboxRef); err != nil {
		t.Fatalf("release the clone: %v", err)
	}
	if err := c.DeleteCheckpoint(s.ctx(t), ck.ID); err != nil {
		t.Fatalf("delete checkpoint: %v", err)
	}
	wantErr(t, "delete checkpoint again", c.DeleteCheckpoint(s.ctx(t), ck.ID), sandbox.ErrNotFound, http.StatusNotFound)
	if s.checkpointListed(t, ck.ID) {
		t.Fatalf("deleted checkpoint %s is still listed", ck.ID)
	}

	if err := c.Release(s.ctx(t), sb.SandboxRef); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, ok := s.row(t, ref, sb.ID); ok {
		t.Fatalf("released sandbox %s is still listed", sb.ID)
	}
	s.assertGone(t, sb.SandboxRef)
}

// countRate measures how fast the counter counts, so the hibernate check can tell a paused
// counter from one that kept running.
func (s *suite) countRate(t *testing.T, sb sandbox.SandboxRef) float64 {
	t.Helper()
	start, n0 := time.Now(), s.readInt(t, sb, "/tmp/count")
	var n1 int
	testutil.EventuallyReports(t, 30*time.Second, "counter advances by 5", func() (bool, string) {
		n1 = s.readInt(t, sb, "/tmp/count")
		return n1 >= n0+5, fmt.Sprint(n1)
	})
	return float64(n1-n0) / time.Since(start).Seconds()
}

// checkCounterAfterWake checks what became of the counter: with memory hibernate it resumes from
// where it was (it neither restarted nor ran while the box slept for asleep) and keeps counting;
// without, its last value is on disk and nothing counts any more. It may run for awake, the time
// the hibernate and wake calls took (before the checkpoint and after the restore), plus the read.
func (s *suite) checkCounterAfterWake(t *testing.T, sb sandbox.SandboxRef, before int, rate float64, asleep, awake time.Duration) {
	t.Helper()
	after := s.readInt(t, sb, "/tmp/count")
	if after < before {
		t.Fatalf("counter after wake is %d, below %d before hibernate: state was lost", after, before)
	}
	if !s.info.MemoryHibernate() {
		// Documented process-runtime behaviour: the disk survives, processes do not.
		time.Sleep(time.Second)
		if again := s.readInt(t, sb, "/tmp/count"); again != after {
			t.Fatalf("engine says hibernate does not keep processes, yet the counter went on: %d then %d", after, again)
		}
		return
	}
	if ran, allowed := rate*asleep.Seconds(), rate*(awake.Seconds()+0.5)+2; float64(after-before) > allowed+ran/2 && ran >= 10 {
		t.Fatalf("counter went from %d to %d over %s hibernated and %s of hibernate and wake calls (%.1f/s): it kept running",
			before, after, asleep, awake, rate)
	}
	testutil.EventuallyReports(t, 30*time.Second, "counter resumes after wake", func() (bool, string) {
		n := s.readInt(t, sb, "/tmp/count")
		return n > after, fmt.Sprintf("%d (was %d)", n, after)
	})
}

func (s *suite) checkpointListed(t *testing.T, id string) bool {
	t.Helper()
	cks, err := s.h.Root.ListCheckpoints(s.ctx(t))
	if err != nil {
		t.Fatalf("list checkpoints: %v", err)
	}
	return slices.ContainsFunc(cks, func(c sandbox.Checkpoint) bool { return c.ID == id })
}

// assertGone checks that every verb on a released sandbox answers 404 (release itself is done).
func (s *suite) assertGone(t *testing.T, sb sandbox.SandboxRef) {
	t.Helper()
	c := s.h.Root
	if err := c.Release(s.ctx(t), sb); err != nil {
		t.Errorf("release again: %v, want nil (404 is done)", err)
	}
	if status, msg := s.raw(t, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/release", sb.Token, nil, nil); status != http.StatusNotFound || msg == "" {
		t.Errorf("raw release of a released sandbox: %d %q, want 404 with an error body", status, msg)
	}
	byRoot := sandbox.SandboxRef{ID: sb.ID, Addr: sb.Addr}
	_, renewErr := c.Renew(s.ctx(t), sb, time.Minute)
	_, execErr := c.Exec(s.ctx(t), sb, sandbox.ExecRequest{Argv: []string{"true"}})
	_, dialErr := c.DialPort(s.ctx(t), sb, 8080)
	_, ckErr := c.Checkpoint(s.ctx(t), sb, "")
	_, getErr := c.Get(s.ctx(t), sb.ID)
	_, statsErr := c.Stats(s.ctx(t), sb.ID)
	for what, err := range map[string]error{
		"hibernate":            c.Hibernate(s.ctx(t), sb),
		"wake":                 c.Wake(s.ctx(t), sb),
		"hibernate by root id": c.Hibernate(s.ctx(t), byRoot),
		"renew":                renewErr,
		"exec":                 execErr,
		"dial port":            dialErr,
		"checkpoint":           ckErr,
		"get":                  getErr,
		"stats":                statsErr,
	} {
		if !errors.Is(err, sandbox.ErrNotFound) || sandbox.StatusCode(err) != http.StatusNotFound {
			t.Errorf("%s after release: %v, want 404", what, err)
		}
	}
}

// cycles hibernates and wakes one sandbox 20 times, appending a line before each cycle and
// checking the whole file after it; every other wake is the transparent one of an exec.
func (s *suite) cycles(t *testing.T) {
	t.Parallel()
	ref := s.ref("cycles")
	sb := s.claim(t, "cycles")
	c := s.h.Root
	var want strings.Builder
	for i := range 20 {
		s.sh(t, sb.SandboxRef, fmt.Sprintf("echo cycle-%d >> /root/log", i))
		fmt.Fprintf(&want, "cycle-%d\n", i)
		if err := c.Hibernate(s.ctx(t), sb.SandboxRef); err != nil {
			t.Fatalf("cycle %d: hibernate: %v", i, err)
		}
		if err := c.Hibernate(s.ctx(t), sb.SandboxRef); err != nil {
			t.Fatalf("cycle %d: hibernate a hibernated sandbox: %v, want success", i, err)
		}
		if row, ok := s.row(t, ref, sb.ID); !ok || !row.Hibernated {
			t.Fatalf("cycle %d: listing shows %+v (listed %v), want hibernated", i, row, ok)
		}
		if i%2 == 0 {
			if err := c.Wake(s.ctx(t), sb.SandboxRef); err != nil {
				t.Fatalf("cycle %d: wake: %v", i, err)
			}
		}
		if got := s.sh(t, sb.SandboxRef, "cat /root/log"); got != want.String() {
			t.Fatalf("cycle %d: /root/log is %q, want %q", i, got, want.String())
		}
		if err := c.Wake(s.ctx(t), sb.SandboxRef); err != nil {
			t.Fatalf("cycle %d: wake a running sandbox: %v, want success", i, err)
		}
	}
}

// claimAdopts checks the engine gives the client what adoption needs: a claim_ref filter on the
// listing and, to the root token, the sandbox's token on GET. A second claim under the same
// claim_ref adopts the first sandbox instead of making another.
func (s *suite) claimAdopts(t *testing.T) {
	t.Parallel()
	if s.h.RootToken == "" {
		t.Skip("an engine without a root token never reveals sandbox tokens, so nothing can be adopted")
	}
	ref := s.ref("adopt")
	other := s.claim(t, "adopt-other") // must not show under ref
	first := s.claim(t, "adopt")
	if first.Adopted {
		t.Fatalf("first claim under %s was adopted", ref)
	}
	row, err := s.h.Root.Get(s.ctx(t), first.ID)
	if err != nil || row.Token != first.Token || row.ClaimRef != ref {
		t.Fatalf("get %s: %+v, %v; want its token and claim_ref %q", first.ID, row, err, ref)
	}
	second := s.claim(t, "adopt")
	if !second.Adopted || second.ID != first.ID || second.Token != first.Token {
		t.Fatalf("second claim under the same claim_ref: %+v, want %s adopted", second, first.ID)
	}
	rows, err := s.h.Root.List(s.ctx(t), ref)
	if err != nil || len(rows) != 1 || rows[0].ID != first.ID || rows[0].ClaimRef != ref {
		t.Fatalf("list claim_ref=%s: %+v, %v; want exactly %s (not %s)", ref, rows, err, first.ID, other.ID)
	}
	all, err := s.h.Root.List(s.ctx(t), "")
	if err != nil || !slices.ContainsFunc(all, func(r sandbox.Sandbox) bool { return r.ID == other.ID }) {
		t.Fatalf("list without claim_ref lacks %s: %v", other.ID, err)
	}
	for _, r := range append(rows, all...) {
		if r.Token != "" {
			t.Fatalf("a listing carries a token: %+v", r)
		}
	}
}
