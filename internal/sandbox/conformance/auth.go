package conformance

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// auth checks the credential rules: a sandbox token reaches only its own sandbox (404 elsewhere,
// never revealing existence), exec takes only the sandbox token, tenants get 403 from root-only
// endpoints and see only their own sandboxes, and a missing or unknown token is 401.
func (s *suite) auth(t *testing.T) {
	t.Parallel()
	c := s.h.Root
	a := s.claim(t, "auth-a")
	b := s.claim(t, "auth-b")
	wrong := sandbox.SandboxRef{ID: b.ID, Token: a.Token, Addr: b.Addr}

	_, execErr := c.Exec(s.ctx(t), wrong, sandbox.ExecRequest{Argv: []string{"true"}})
	_, renewErr := c.Renew(s.ctx(t), wrong, time.Minute)
	_, dialErr := c.DialPort(s.ctx(t), wrong, 8080)
	_, ckErr := c.Checkpoint(s.ctx(t), wrong, "")
	_, rootExecErr := c.Exec(s.ctx(t), sandbox.SandboxRef{ID: b.ID, Addr: b.Addr}, sandbox.ExecRequest{Argv: []string{"true"}})
	for what, err := range map[string]error{
		"exec with another sandbox's token":       execErr,
		"hibernate with another sandbox's token":  c.Hibernate(s.ctx(t), wrong),
		"wake with another sandbox's token":       c.Wake(s.ctx(t), wrong),
		"renew with another sandbox's token":      renewErr,
		"dial port with another sandbox's token":  dialErr,
		"checkpoint with another sandbox's token": ckErr,
		"exec with the root token":                rootExecErr, // data-plane verbs take only the sandbox token
	} {
		wantErr(t, what, err, sandbox.ErrNotFound, http.StatusNotFound)
	}
	// The client reads release's 404 as done, so check the sandbox really survived it.
	if err := c.Release(s.ctx(t), wrong); err != nil {
		t.Fatalf("release with another sandbox's token: %v", err)
	}
	if status, _ := s.raw(t, http.MethodPost, "/v1/sandboxes/"+b.ID+"/release", a.Token, nil, nil); status != http.StatusNotFound {
		t.Fatalf("raw release with another sandbox's token: %d, want 404", status)
	}
	if out := s.sh(t, b.SandboxRef, "echo alive"); out != "alive\n" {
		t.Fatalf("sandbox after a release with the wrong token: %q", out)
	}

	if s.h.RootToken != "" {
		none := s.h.WithToken("")
		_, listErr := none.List(s.ctx(t), "")
		_, infoErr := none.Info(s.ctx(t))
		_, claimErr := none.Claim(s.ctx(t), sandbox.ClaimRequest{Template: s.h.Template, ClaimRef: s.ref("auth-none")})
		_, noTokExecErr := none.Exec(s.ctx(t), sandbox.SandboxRef{ID: a.ID, Addr: a.Addr}, sandbox.ExecRequest{Argv: []string{"true"}})
		_, bogusErr := s.h.WithToken("not-a-token-"+s.run).List(s.ctx(t), "")
		_, sbTokErr := s.h.WithToken(a.Token).List(s.ctx(t), "") // a sandbox token is no node credential
		for what, err := range map[string]error{
			"list without a token":        listErr,
			"info without a token":        infoErr,
			"claim without a token":       claimErr,
			"exec without a token":        noTokExecErr,
			"list with an unknown token":  bogusErr,
			"list with a sandbox's token": sbTokErr,
		} {
			wantErr(t, what, err, sandbox.ErrUnauthorized, http.StatusUnauthorized)
		}
	}

	if s.h.Tenant == nil {
		t.Log("no tenant client: tenant checks skipped")
		return
	}
	tc := s.h.Tenant
	_, infoErr := tc.Info(s.ctx(t))
	_, getErr := tc.Get(s.ctx(t), a.ID)
	_, statsErr := tc.Stats(s.ctx(t), a.ID)
	for what, err := range map[string]error{"info": infoErr, "get": getErr, "stats": statsErr} {
		if msg := wantErr(t, "tenant "+what, err, sandbox.ErrForbidden, http.StatusForbidden); msg != sandbox.MsgOperatorRequired {
			t.Errorf("tenant %s: message %q, want %q", what, msg, sandbox.MsgOperatorRequired)
		}
	}
	mine := s.claimWith(t, tc, sandbox.ClaimRequest{ClaimRef: s.ref("auth-tenant")})
	rows, err := tc.List(s.ctx(t), "")
	if err != nil {
		t.Fatalf("tenant list: %v", err)
	}
	ids := func(rows []sandbox.Sandbox) []string {
		var out []string
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	if got := ids(rows); !slices.Contains(got, mine.ID) || slices.Contains(got, a.ID) {
		t.Fatalf("tenant list %v: want its own %s and not root's %s", got, mine.ID, a.ID)
	}
	if _, ok := s.row(t, s.ref("auth-tenant"), mine.ID); !ok {
		t.Fatalf("root does not see the tenant's sandbox %s", mine.ID)
	}
	if out := s.sh(t, mine.SandboxRef, "echo tenant"); out != "tenant\n" {
		t.Fatalf("exec in the tenant's sandbox: %q", out)
	}
}

// raw sends a request the client would never send and returns the status and the error body's
// message ("" when the body is not the contract's error shape).
func (s *suite) raw(t *testing.T, method, path, token string, body []byte, header http.Header) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(s.ctx(t), method, s.h.URL+path, rd)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.h.HTTPClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var eb sandbox.ErrorBody
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	_ = json.Unmarshal(raw, &eb)
	return resp.StatusCode, eb.Error
}
