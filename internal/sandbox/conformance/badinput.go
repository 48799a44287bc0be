package conformance

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// badInput sends what the contract refuses and checks the documented status, an error body that
// names the problem, and that nothing changed: no sandbox under the claim_ref of a refused claim,
// no side effect of a refused exec, the sandbox's row as before.
func (s *suite) badInput(t *testing.T) {
	t.Parallel()
	c := s.h.Root
	noSandbox := func(what, ref string) {
		t.Helper()
		if rows, err := c.List(s.ctx(t), ref); err != nil || len(rows) != 0 {
			t.Errorf("%s: %d sandboxes under %s (%v), want none", what, len(rows), ref, err)
		}
	}

	claims := []struct {
		what    string
		req     sandbox.ClaimRequest
		mention []string
	}{
		{"unknown size", sandbox.ClaimRequest{Template: s.h.Template, Size: "huge"}, []string{"huge", "size"}},
		{"unknown template", sandbox.ClaimRequest{Template: "no-such-template-" + s.run, Size: s.h.Size}, []string{"no-such-template-" + s.run, "template"}},
		{"negative ttl", sandbox.ClaimRequest{Template: s.h.Template, Size: s.h.Size, TTLSeconds: -5}, []string{"ttl"}},
	}
	for i, tc := range claims {
		tc.req.ClaimRef = s.ref("bad-claim-" + string(rune('a'+i)))
		_, err := c.Claim(s.ctx(t), tc.req)
		msg := wantErr(t, "claim with "+tc.what, err, sandbox.ErrInvalid, http.StatusBadRequest)
		mentions(t, "claim with "+tc.what, msg, tc.mention...)
		noSandbox("claim with "+tc.what, tc.req.ClaimRef)
	}

	// Bodies the client never sends: over 1 MiB, and not JSON.
	bigRef, badRef := s.ref("bad-claim-big"), s.ref("bad-claim-malformed")
	big, _ := json.Marshal(map[string]any{"template": s.h.Template, "claim_ref": bigRef, "pad": strings.Repeat("x", sandbox.MaxBodyBytes)})
	for what, body := range map[string][]byte{
		"oversized claim body": big,
		"malformed claim body": []byte(`{"template": "` + s.h.Template + `", "claim_ref": "` + badRef + `",`),
	} {
		status, msg := s.raw(t, http.MethodPost, "/v1/claim", s.h.RootToken, body, nil)
		if status != http.StatusBadRequest || msg != sandbox.MsgInvalidBody {
			t.Errorf("%s: %d %q, want 400 %q", what, status, msg, sandbox.MsgInvalidBody)
		}
	}
	noSandbox("oversized claim body", bigRef)
	noSandbox("malformed claim body", badRef)

	ref := s.ref("bad-exec")
	sb := s.claim(t, "bad-exec")
	before, _ := s.row(t, ref, sb.ID)
	execs := []struct {
		what    string
		req     sandbox.ExecRequest
		mention []string
	}{
		{"empty argv", sandbox.ExecRequest{Argv: []string{}}, []string{"argv"}},
		{"no argv", sandbox.ExecRequest{}, []string{"argv"}},
		{"a missing binary", sandbox.ExecRequest{Argv: []string{"/no/such/binary-" + s.run}}, []string{"binary-" + s.run, "not found", "no such"}},
		{"a missing cwd", sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo x > /tmp/bad-cwd"}, Cwd: "/no/such/dir-" + s.run}, []string{"dir-" + s.run, "cwd"}},
		{"a negative timeout", sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo x > /tmp/bad-timeout"}, TimeoutSeconds: -1}, []string{"timeout"}},
	}
	for _, tc := range execs {
		_, err := c.Exec(s.ctx(t), sb.SandboxRef, tc.req)
		msg := wantErr(t, "exec with "+tc.what, err, sandbox.ErrInvalid, http.StatusBadRequest)
		mentions(t, "exec with "+tc.what, msg, tc.mention...)
	}

	path := "/v1/sandboxes/" + sb.ID + "/exec"
	unknown := []byte(`{"argv": ["sh", "-c", "echo x > /tmp/bad-field"], "bogus_field": 1}`)
	status, msg := s.raw(t, http.MethodPost, path, sb.Token, unknown, nil)
	if status != http.StatusBadRequest {
		t.Errorf("exec with an unknown field: %d %q, want 400", status, msg)
	}
	mentions(t, "exec with an unknown field", msg, "bogus_field", sandbox.MsgInvalidBody)
	big, _ = json.Marshal(sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo x > /tmp/bad-big", strings.Repeat("x", sandbox.MaxBodyBytes)}})
	if status, msg := s.raw(t, http.MethodPost, path, sb.Token, big, nil); status != http.StatusBadRequest || msg != sandbox.MsgInvalidBody {
		t.Errorf("oversized exec body: %d %q, want 400 %q", status, msg, sandbox.MsgInvalidBody)
	}
	hdr := http.Header{"Upgrade": {"tcp"}, "Connection": {"Upgrade"}}
	for _, port := range []string{"0", "65536"} {
		if status, msg := s.raw(t, http.MethodGet, "/v1/sandboxes/"+sb.ID+"/ports/"+port, sb.Token, nil, hdr); status != http.StatusBadRequest || msg == "" {
			t.Errorf("relay to port %s: %d %q, want 400 with an error body", port, status, msg)
		}
	}

	// Nothing ran and nothing moved.
	if out := s.sh(t, sb.SandboxRef, "ls /tmp/bad-cwd /tmp/bad-timeout /tmp/bad-field /tmp/bad-big 2>/dev/null; true"); out != "" {
		t.Errorf("refused execs left files behind: %q", out)
	}
	after, ok := s.row(t, ref, sb.ID)
	if !ok || after.Hibernated != before.Hibernated || !after.Deadline.Equal(before.Deadline) {
		t.Errorf("sandbox row changed by refused requests: before %+v, after %+v (listed %v)", before, after, ok)
	}
}
