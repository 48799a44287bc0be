package sandbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/sandbox/sandboxtest"
)

// TestReleaseNotFoundIsDone: releasing a sandbox that is already gone (by us, by the reaper, or
// never there) succeeds; other verbs on it are ErrNotFound.
func TestReleaseNotFoundIsDone(t *testing.T) {
	f := newFake(t)
	c := f.Client(rootToken)
	sb, err := c.Claim(t.Context(), claimReq("rel"))
	if err != nil {
		t.Fatal(err)
	}
	for i, ref := range []sandbox.SandboxRef{sb.SandboxRef, sb.SandboxRef, {ID: "sb_0000000000000000"}} {
		if err := c.Release(t.Context(), ref); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	if n := f.Calls(sandboxtest.VerbRelease); n != 3 {
		t.Fatalf("%d releases sent, want 3", n)
	}
	if err := c.Hibernate(t.Context(), sb.SandboxRef); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("hibernate a released sandbox: %v", err)
	}
}

// TestReleaseLostAnswer: the release happened but its answer was lost; the retry's 404 is done.
func TestReleaseLostAnswer(t *testing.T) {
	f := newFake(t)
	c := f.Client(rootToken)
	sb, err := c.Claim(t.Context(), claimReq("rel-lost"))
	if err != nil {
		t.Fatal(err)
	}
	f.FailNext(sandboxtest.VerbRelease, sandboxtest.Fault{AfterEffect: true, Drop: true})
	if err := c.Release(t.Context(), sb.SandboxRef); err != nil {
		t.Fatalf("release: %v", err)
	}
	if n := f.Calls(sandboxtest.VerbRelease); n != 2 || len(f.Sandboxes()) != 0 {
		t.Fatalf("%d releases sent, sandboxes left %v; want 2 and none", n, f.Sandboxes())
	}
}

// TestRetryAfter: a short Retry-After on a safe verb is waited out and retried; a long one goes
// back to the caller at once, carrying the wait.
func TestRetryAfter(t *testing.T) {
	f := newFake(t)
	c := f.Client(rootToken)
	sb, err := c.Claim(t.Context(), claimReq("ra"))
	if err != nil {
		t.Fatal(err)
	}
	f.FailNext(sandboxtest.VerbHibernate, sandboxtest.Fault{Status: 503, Message: "busy", RetryAfter: time.Second})
	start := time.Now()
	if err := c.Hibernate(t.Context(), sb.SandboxRef); err != nil {
		t.Fatalf("hibernate: %v", err)
	}
	if took, n := time.Since(start), f.Calls(sandboxtest.VerbHibernate); took < time.Second || n != 2 {
		t.Fatalf("hibernate took %s over %d calls, want ≥1s and 2", took, n)
	}

	f.FailNext(sandboxtest.VerbWake, sandboxtest.Fault{Status: 503, Message: "heal cap full", RetryAfter: 30 * time.Second})
	start = time.Now()
	err = c.Wake(t.Context(), sb.SandboxRef)
	if !errors.Is(err, sandbox.ErrUnavailable) || sandbox.RetryAfter(err) != 30*time.Second {
		t.Fatalf("wake: %v (retry after %s), want unavailable with 30s", err, sandbox.RetryAfter(err))
	}
	if took, n := time.Since(start), f.Calls(sandboxtest.VerbWake); took > 5*time.Second || n != 1 {
		t.Fatalf("wake took %s over %d calls, want an immediate answer", took, n)
	}
}

// TestExecNotRetried: a lost exec answer is an error, never a second run.
func TestExecNotRetried(t *testing.T) {
	f := newFake(t)
	c := f.Client(rootToken)
	sb, err := c.Claim(t.Context(), claimReq("exec-once"))
	if err != nil {
		t.Fatal(err)
	}
	f.FailNext(sandboxtest.VerbExec, sandboxtest.Fault{AfterEffect: true, Drop: true})
	if _, err := c.Exec(t.Context(), sb.SandboxRef, sandbox.ExecRequest{Argv: []string{"true"}}); err == nil {
		t.Fatal("exec with a lost answer succeeded")
	}
	if n := f.Calls(sandboxtest.VerbExec); n != 1 {
		t.Fatalf("%d execs sent, want 1", n)
	}
}

// TestEgressCannotHibernate: 409 maps to ErrConflict end to end.
func TestEgressCannotHibernate(t *testing.T) {
	f := newFake(t)
	c := f.Client(rootToken)
	sb, err := c.Claim(t.Context(), sandbox.ClaimRequest{Template: "base", Net: sandbox.NetEgress, ClaimRef: "egress"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Hibernate(t.Context(), sb.SandboxRef); !errors.Is(err, sandbox.ErrConflict) {
		t.Fatalf("hibernate on the egress lane: %v, want %v", err, sandbox.ErrConflict)
	}
}
