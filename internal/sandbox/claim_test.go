package sandbox_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/sandbox/sandboxtest"
)

const rootToken, tenantToken = "root-token", "tenant-token"

func newFake(t *testing.T) *sandboxtest.Fake {
	return sandboxtest.New(t, sandboxtest.Options{RootToken: rootToken, Tenants: map[string]string{tenantToken: "acme"}})
}

func claimReq(ref string) sandbox.ClaimRequest {
	return sandbox.ClaimRequest{Template: "base", ClaimRef: ref}
}

// mustEcho checks a claimed sandbox answers exec with its token.
func mustEcho(t *testing.T, c sandbox.Client, sb sandbox.SandboxRef) {
	t.Helper()
	res, err := c.Exec(t.Context(), sb, sandbox.ExecRequest{Argv: []string{"echo", "ok"}})
	if err != nil || res.Stdout != "ok\n" {
		t.Fatalf("exec in %s: %+v, %v", sb.ID, res, err)
	}
}

// TestClaimAdoptsAfterLostAnswer: the engine creates the sandbox but the answer never arrives.
// Claim must list by claim_ref, find it, fetch its token and return it, not claim a second one.
func TestClaimAdoptsAfterLostAnswer(t *testing.T) {
	f := newFake(t)
	f.FailNext(sandboxtest.VerbClaim, sandboxtest.Fault{AfterEffect: true, Drop: true})
	c := f.Client(rootToken)
	got, err := c.Claim(t.Context(), claimReq("box-1/attempt-1"))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if !got.Adopted || len(f.Sandboxes()) != 1 || f.Sandboxes()[0] != got.ID {
		t.Fatalf("got %+v with sandboxes %v, want the one lost sandbox adopted", got, f.Sandboxes())
	}
	if n := f.Calls(sandboxtest.VerbClaim); n != 1 {
		t.Fatalf("%d claims posted, want 1", n)
	}
	mustEcho(t, c, got.SandboxRef)
}

// TestClaimAdoptsBeforePosting: an earlier attempt (say, a Temporal retry of the activity)
// already claimed under the same claim_ref.
func TestClaimAdoptsBeforePosting(t *testing.T) {
	f := newFake(t)
	c := f.Client(rootToken)
	first, err := c.Claim(t.Context(), claimReq("box-1/attempt-1"))
	if err != nil || first.Adopted {
		t.Fatalf("first claim: %+v, %v", first, err)
	}
	again, err := c.Claim(t.Context(), claimReq("box-1/attempt-1"))
	if err != nil || !again.Adopted || again.SandboxRef != first.SandboxRef {
		t.Fatalf("second claim: %+v, %v; want %+v adopted", again, err, first.SandboxRef)
	}
	if n := f.Calls(sandboxtest.VerbClaim); n != 1 {
		t.Fatalf("%d claims posted, want 1", n)
	}
}

// TestClaimRetriesWhenNothingLanded: the connection dies before the engine acts; the listing is
// empty, so Claim posts again.
func TestClaimRetriesWhenNothingLanded(t *testing.T) {
	f := newFake(t)
	f.FailNext(sandboxtest.VerbClaim, sandboxtest.Fault{Drop: true})
	f.FailNext(sandboxtest.VerbClaim, sandboxtest.Fault{Status: 503, Message: "busy"})
	got, err := f.Client(rootToken).Claim(t.Context(), claimReq("r"))
	if err != nil || got.Adopted {
		t.Fatalf("claim: %+v, %v", got, err)
	}
	if claims, lists := f.Calls(sandboxtest.VerbClaim), f.Calls(sandboxtest.VerbList); claims != 3 || lists != 3 {
		t.Fatalf("%d claims and %d listings, want 3 and 3 (a listing before every post)", claims, lists)
	}
	if len(f.Sandboxes()) != 1 {
		t.Fatalf("sandboxes %v, want one", f.Sandboxes())
	}
}

// TestClaimGivesUp: every answer is lost and nothing lands; Claim stops after its attempts and
// returns the last failure.
func TestClaimGivesUp(t *testing.T) {
	f := newFake(t)
	for range 4 {
		f.FailNext(sandboxtest.VerbClaim, sandboxtest.Fault{Status: 500, Message: "provisioning failed"})
	}
	_, err := f.Client(rootToken).Claim(t.Context(), claimReq("r"))
	if !errors.Is(err, sandbox.ErrInternal) || !strings.Contains(err.Error(), "provisioning failed") {
		t.Fatalf("claim: %v, want the engine's 500", err)
	}
	if claims, lists := f.Calls(sandboxtest.VerbClaim), f.Calls(sandboxtest.VerbList); claims != 3 || lists != 4 {
		t.Fatalf("%d claims and %d listings, want 3 and 4", claims, lists)
	}
}

// TestClaimRefusalIsFinal: a 4xx is the engine's definite answer; nothing is retried.
func TestClaimRefusalIsFinal(t *testing.T) {
	f := newFake(t)
	_, err := f.Client(rootToken).Claim(t.Context(), sandbox.ClaimRequest{Template: "base", Size: "huge", ClaimRef: "r"})
	if got, want := err.Error(), `sandbox: claim: 400 unknown size "huge": invalid`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if n := f.Calls(sandboxtest.VerbClaim); n != 1 {
		t.Fatalf("%d claims posted, want 1", n)
	}
}

func TestClaimRequiresClaimRef(t *testing.T) {
	f := newFake(t)
	_, err := f.Client(rootToken).Claim(t.Context(), sandbox.ClaimRequest{Template: "base"})
	if !errors.Is(err, sandbox.ErrInvalid) || f.Calls(sandboxtest.VerbList)+f.Calls(sandboxtest.VerbClaim) != 0 {
		t.Fatalf("claim without claim_ref: %v after %d calls, want a local refusal", err, f.Calls(sandboxtest.VerbList))
	}
}

// TestClaimReleasesDuplicates: earlier lost answers left two sandboxes under one claim_ref; the
// newest is adopted and the other released.
func TestClaimReleasesDuplicates(t *testing.T) {
	f := newFake(t)
	raw := f.Client(rootToken)
	for range 2 { // bypass Claim's listing, as two racing workers would
		postClaim(t, f.URL, `{"template":"base","claim_ref":"dup"}`)
	}
	if len(f.Sandboxes()) != 2 {
		t.Fatalf("setup: %v", f.Sandboxes())
	}
	rows, _ := raw.List(t.Context(), "dup")
	newest := rows[len(rows)-1].ID // the fake lists oldest first
	got, err := raw.Claim(t.Context(), claimReq("dup"))
	if err != nil || !got.Adopted || got.ID != newest {
		t.Fatalf("claim: %+v, %v; want %s adopted", got, err, newest)
	}
	if ids := f.Sandboxes(); len(ids) != 1 || ids[0] != newest {
		t.Fatalf("sandboxes %v, want only %s", ids, newest)
	}
}

func postClaim(t *testing.T, base, body string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/claim", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+rootToken)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestClaimWithoutRootCannotAdopt: a tenant cannot learn a sandbox's token, so after a lost answer
// it claims anew and the orphan is left to its lease (documented in claim.go).
func TestClaimWithoutRootCannotAdopt(t *testing.T) {
	f := newFake(t)
	f.FailNext(sandboxtest.VerbClaim, sandboxtest.Fault{AfterEffect: true, Drop: true})
	c := f.Client(tenantToken)
	got, err := c.Claim(t.Context(), claimReq("tenant-ref"))
	if err != nil || got.Adopted {
		t.Fatalf("claim: %+v, %v; want a fresh sandbox", got, err)
	}
	if n := len(f.Sandboxes()); n != 2 {
		t.Fatalf("%d sandboxes, want the orphan and the new one", n)
	}
	mustEcho(t, c, got.SandboxRef)
}

// TestClaimFollowsRedirect: the origin answers 200 {redirect}; the same body goes, with
// no_redirect, to the target, and the sandbox is addressed there afterwards.
func TestClaimFollowsRedirect(t *testing.T) {
	origin, peer := newFake(t), newFake(t)
	origin.FailNext(sandboxtest.VerbClaim, sandboxtest.Fault{Redirect: []string{deadAddr(t), peer.Addr()}})
	c := origin.Client(rootToken)
	got, err := c.Claim(t.Context(), sandbox.ClaimRequest{Template: "base", Size: "medium", ClaimRef: "redir"})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if got.Addr != peer.Addr() || len(peer.Sandboxes()) != 1 || len(origin.Sandboxes()) != 0 {
		t.Fatalf("claimed %+v; peer has %v, origin %v", got, peer.Sandboxes(), origin.Sandboxes())
	}
	if last := peer.LastClaim(); !last.NoRedirect || last.Size != "medium" || last.ClaimRef != "redir" {
		t.Fatalf("peer got %+v, want the same body with no_redirect", last)
	}
	mustEcho(t, c, got.SandboxRef) // routed to the peer by Addr
	if err := c.Release(t.Context(), got.SandboxRef); err != nil || len(peer.Sandboxes()) != 0 {
		t.Fatalf("release at the peer: %v, left %v", err, peer.Sandboxes())
	}
}

// TestClaimRedirectFallsBackToOrigin: no target answers, so the origin gets one no_redirect try.
func TestClaimRedirectFallsBackToOrigin(t *testing.T) {
	origin := newFake(t)
	origin.FailNext(sandboxtest.VerbClaim, sandboxtest.Fault{Redirect: []string{deadAddr(t)}})
	got, err := origin.Client(rootToken).Claim(t.Context(), claimReq("fallback"))
	if err != nil || got.Addr != "" || len(origin.Sandboxes()) != 1 || !origin.LastClaim().NoRedirect {
		t.Fatalf("claim: %+v, %v; origin has %v", got, err, origin.Sandboxes())
	}
}

// TestClaimRedirectLostAtTarget: the target created the sandbox but its answer was lost; the
// client adopts it there instead of trying the next target.
func TestClaimRedirectLostAtTarget(t *testing.T) {
	origin, peer, other := newFake(t), newFake(t), newFake(t)
	origin.FailNext(sandboxtest.VerbClaim, sandboxtest.Fault{Redirect: []string{peer.Addr(), other.Addr()}})
	peer.FailNext(sandboxtest.VerbClaim, sandboxtest.Fault{AfterEffect: true, Drop: true})
	got, err := origin.Client(rootToken).Claim(t.Context(), claimReq("lost-at-peer"))
	if err != nil || !got.Adopted || got.Addr != peer.Addr() {
		t.Fatalf("claim: %+v, %v; want adopted at %s", got, err, peer.Addr())
	}
	if len(peer.Sandboxes()) != 1 || len(other.Sandboxes())+len(origin.Sandboxes()) != 0 {
		t.Fatalf("peer %v, other %v, origin %v: want exactly one, at the peer", peer.Sandboxes(), other.Sandboxes(), origin.Sandboxes())
	}
}

// TestClaimFromCheckpointRedirect: claim-from-checkpoint follows redirects the same way.
func TestClaimFromCheckpointRedirect(t *testing.T) {
	f := newFake(t)
	c := f.Client(rootToken)
	sb, err := c.Claim(t.Context(), claimReq("ck-src"))
	if err != nil {
		t.Fatal(err)
	}
	ck, err := c.Checkpoint(t.Context(), sb.SandboxRef, "n")
	if err != nil {
		t.Fatal(err)
	}
	f.FailNext(sandboxtest.VerbCheckpointClaim, sandboxtest.Fault{Redirect: []string{deadAddr(t)}})
	got, err := c.ClaimFromCheckpoint(t.Context(), ck.ID, time.Minute, "")
	if err != nil || got.ID == sb.ID || f.Calls(sandboxtest.VerbCheckpointClaim) != 2 {
		t.Fatalf("claim from checkpoint: %+v, %v after %d calls", got, err, f.Calls(sandboxtest.VerbCheckpointClaim))
	}
	mustEcho(t, c, got.SandboxRef)
}

// TestClaimAnswerWithoutSandbox: a 200 that names no sandbox is an error, not an empty success.
func TestClaimAnswerWithoutSandbox(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Write([]byte(`{"sandboxes":[]}`))
			return
		}
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := sandbox.NewHTTP(srv.URL, "", srv.Client()).Claim(ctx, claimReq("x"))
	if !errors.Is(err, sandbox.ErrInternal) {
		t.Fatalf("claim: %v, want %v", err, sandbox.ErrInternal)
	}
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
