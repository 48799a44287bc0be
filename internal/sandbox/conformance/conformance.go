// Package conformance checks that a sandbox engine keeps the sandboxd contract
// (shared/SANDBOXD.md), through the same client the activities use. cocoonbox runs against two
// engines — upstream sandboxd in production and its own local engine elsewhere — and this suite is
// what makes "they behave the same" a tested fact rather than a hope: the local engine runs it in
// make test, a real sandboxd runs it when SANDBOXD_URL is set, and sandboxtest's fake runs it so
// the suite itself is exercised.
//
// Where an engine says in GET /v1/info that it cannot preserve memory across hibernate, the suite
// checks the documented alternative (the disk survives, processes stop) instead.
//
// The claimed template must provide sh, coreutils and perl (perl-base, essential on Debian and
// Ubuntu), which the relay checks use for a small TCP server inside the box.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"net/http"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// Harness is what the suite needs from the engine under test.
type Harness struct {
	// Root is a client presenting the engine's root token. Required.
	Root sandbox.Client
	// Tenant is a client presenting a tenant token; nil skips the tenant checks.
	Tenant sandbox.Client
	// WithToken returns a client presenting token ("" for none). Required.
	WithToken func(token string) sandbox.Client
	// URL is the engine's base URL, for the checks that send what the client never would:
	// oversized and malformed bodies, unknown fields, a relay GET without Upgrade. Required.
	URL string
	// RootToken is the root token, for those raw checks. Empty means the engine runs without
	// tokens, and the checks that need a refused credential are skipped.
	RootToken string
	// HTTPClient sends the raw checks; nil means a client with a one-minute timeout.
	HTTPClient *http.Client
	// Template and Size are what the suite claims; Size "" is the engine's default.
	Template, Size string
	// RestartEngine stops the engine as SIGKILL would and starts it again on the same address
	// and data; nil skips the restart checks.
	RestartEngine func(t *testing.T)
	// CallTimeout bounds each engine call; 0 means two minutes.
	CallTimeout time.Duration
}

// suite is one run of the checks against one engine.
type suite struct {
	h    Harness
	run  string // makes this run's claim_refs unique
	info sandbox.Info
}

// Run runs every check against the engine h describes. The checks run in parallel, each on its own
// sandboxes, and release what they claim; the restart checks run alone at the end.
func Run(t *testing.T, h Harness) {
	if h.Root == nil || h.WithToken == nil || h.URL == "" || h.Template == "" {
		t.Fatal("conformance: Harness needs Root, WithToken, URL and Template")
	}
	if h.HTTPClient == nil {
		h.HTTPClient = &http.Client{Timeout: time.Minute}
	}
	if h.CallTimeout == 0 {
		h.CallTimeout = 2 * time.Minute
	}
	s := &suite{h: h, run: randomHex(4)}
	info, err := h.Root.Info(s.ctx(t))
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	s.info = info
	t.Logf("engine runtime %q, memory hibernate %v", info.Runtime, info.MemoryHibernate())

	t.Run("contract", func(t *testing.T) {
		t.Run("Lifecycle", s.lifecycle)
		t.Run("HibernateWakeCycles", s.cycles)
		t.Run("ClaimAdopts", s.claimAdopts)
		t.Run("Auth", s.auth)
		t.Run("BadInput", s.badInput)
		t.Run("Exec", s.execChecks)
		t.Run("Relay", s.relay)
		t.Run("RelayBareGET", s.relayBareGET)
		t.Run("LeaseExpiry", s.leaseExpiry)
		t.Run("InfoAndStats", s.infoAndStats)
	})
	t.Run("Restart", s.restart)
}

// ctx bounds one engine call (or a short sequence of them).
func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), s.h.CallTimeout)
	t.Cleanup(cancel)
	return ctx
}

// ref is a claim_ref unique to this run and check.
func (s *suite) ref(name string) string {
	return "conformance/" + s.run + "/" + name
}

// claim claims a sandbox under s.ref(name) and releases it when the test ends.
func (s *suite) claim(t *testing.T, name string) sandbox.Claimed {
	t.Helper()
	return s.claimWith(t, s.h.Root, sandbox.ClaimRequest{ClaimRef: s.ref(name)})
}

// claimWith fills in the harness's template and size, claims through c and releases at the end.
func (s *suite) claimWith(t *testing.T, c sandbox.Client, req sandbox.ClaimRequest) sandbox.Claimed {
	t.Helper()
	req.Template, req.Size = s.h.Template, s.h.Size
	got, err := c.Claim(s.ctx(t), req)
	if err != nil {
		t.Fatalf("claim %s: %v", req.ClaimRef, err)
	}
	s.releaseAtEnd(t, got.SandboxRef)
	return got
}

func (s *suite) releaseAtEnd(t *testing.T, sb sandbox.SandboxRef) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.h.CallTimeout)
		defer cancel()
		if err := s.h.Root.Release(ctx, sb); err != nil {
			t.Logf("release %s at cleanup: %v", sb.ID, err)
		}
	})
}

// sh runs script with sh -c in the sandbox and returns its stdout, failing on any error or a
// non-zero exit.
func (s *suite) sh(t *testing.T, sb sandbox.SandboxRef, script string) string {
	t.Helper()
	return s.shEnv(t, sb, script, nil)
}

func (s *suite) shEnv(t *testing.T, sb sandbox.SandboxRef, script string, env map[string]string) string {
	t.Helper()
	res, err := s.h.Root.Exec(s.ctx(t), sb, sandbox.ExecRequest{Argv: []string{"sh", "-c", script}, Env: env})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exec %q: exit %d, stderr %q", script, res.ExitCode, res.Stderr)
	}
	return res.Stdout
}

// row returns the listing row of sb (found by its claim_ref), or ok false when it is not listed.
func (s *suite) row(t *testing.T, ref, id string) (sandbox.Sandbox, bool) {
	t.Helper()
	rows, err := s.h.Root.List(s.ctx(t), ref)
	if err != nil {
		t.Fatalf("list %s: %v", ref, err)
	}
	for _, r := range rows {
		if r.ID == id {
			return r, true
		}
	}
	return sandbox.Sandbox{}, false
}

// wantErr asserts err is the engine's answer status with kind and a non-empty message, and
// returns the message.
func wantErr(t *testing.T, what string, err error, kind error, status int) string {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("%s: got %v, want %v", what, err, kind)
	}
	e, ok := errors.AsType[*sandbox.Error](err)
	if !ok || e.Status != status {
		t.Fatalf("%s: got %v, want status %d", what, err, status)
	}
	if e.Message == "" {
		t.Fatalf("%s: %d without an error message", what, status)
	}
	return e.Message
}

// mentions asserts an error message names what was wrong (DESIGN §11: the field is named).
func mentions(t *testing.T, what, msg string, any ...string) {
	t.Helper()
	for _, w := range any {
		if strings.Contains(strings.ToLower(msg), strings.ToLower(w)) {
			return
		}
	}
	t.Errorf("%s: message %q names none of %q", what, msg, any)
}

// readInt reads an integer file in the box.
func (s *suite) readInt(t *testing.T, sb sandbox.SandboxRef, path string) int {
	t.Helper()
	out := strings.TrimSpace(s.sh(t, sb, "cat "+path+" 2>/dev/null || echo 0"))
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("read %s: %q is not a number", path, out)
	}
	return n
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
