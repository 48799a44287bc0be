package engine_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/enginetest"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// TestAuthNodeEndpoints is the node-level half of the contract's auth rules: root everything,
// tenants the resource-creating verbs and their own listings (403 on operator endpoints), an
// unknown or missing token 401, and a sandbox token is no node credential.
func TestAuthNodeEndpoints(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	claim := sandbox.ClaimRequest{Template: "base"}
	type ep struct{ method, path string }
	endpoints := map[string]ep{
		"claim":       {"POST", "/v1/claim"},
		"list":        {"GET", "/v1/sandboxes"},
		"checkpoints": {"GET", "/v1/checkpoints"},
		"get":         {"GET", "/v1/sandboxes/" + sb.ID},
		"stats":       {"GET", "/v1/sandboxes/" + sb.ID + "/stats"},
		"info":        {"GET", "/v1/info"},
		"pools":       {"PUT", "/v1/pools"},
		"metrics":     {"GET", "/metrics"},
	}
	bodies := map[string]any{"claim": claim, "pools": sandbox.PoolsRequest{Pools: []sandbox.PoolSpec{}}}
	operatorOnly := []string{"get", "stats", "info", "pools", "metrics"}
	for name, ep := range endpoints {
		for _, who := range []struct {
			name, token string
			want        int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"unknown token", "nope", http.StatusUnauthorized},
			{"sandbox token", sb.Token, http.StatusUnauthorized},
			{"tenant", tenantA, http.StatusOK},
			{"root", rootToken, http.StatusOK},
		} {
			want := who.want
			if who.name == "tenant" && slices.Contains(operatorOnly, name) {
				want = http.StatusForbidden
			}
			t.Run(name+"/"+who.name, func(t *testing.T) {
				code, data, _ := h.call(ep.method, ep.path, who.token, bodies[name])
				if code != want {
					t.Fatalf("status %d, want %d (%s)", code, want, data)
				}
				if want == http.StatusForbidden && errorOf(t, data) != "operator token required" {
					t.Fatalf("403 body %s", data)
				}
				if want >= 400 {
					errorOf(t, data)
				}
			})
		}
	}
	if code, data, _ := h.call("GET", "/healthz", "", nil); code != 200 || string(data) != "ok" {
		t.Fatalf("healthz: %d %q", code, data)
	}
}

// TestAuthSandboxVerbs: a sandbox's own token works; another sandbox's token, a tenant token
// and an unknown token answer 404 exactly like an unknown id; root is accepted for release,
// hibernate, wake and renew only.
func TestAuthSandboxVerbs(t *testing.T) {
	h := newHarness(t)
	other := h.claim(tenantB, sandbox.ClaimRequest{})
	verbs := []struct {
		name, method, suffix string
		body                 any
		ok                   int
		rootOK               bool
	}{
		{"hibernate", "POST", "/hibernate", nil, 204, true},
		{"wake", "POST", "/wake", nil, 204, true},
		{"renew", "POST", "/renew", sandbox.RenewRequest{TTLSeconds: 60}, 200, true},
		{"exec", "POST", "/exec", sandbox.ExecRequest{Argv: []string{"echo", "hi"}}, 200, false},
		{"release", "POST", "/release", nil, 204, true},
	}
	for _, v := range verbs {
		t.Run(v.name, func(t *testing.T) {
			sb := h.claim(tenantA, sandbox.ClaimRequest{})
			path := "/v1/sandboxes/" + sb.ID + v.suffix
			for _, bad := range []struct {
				name, token string
				want        int
			}{
				{"no token", "", 401},
				{"unknown token", "nope", 404},
				{"tenant token", tenantA, 404},
				{"other sandbox's token", other.Token, 404},
			} {
				code, data, _ := h.call(v.method, path, bad.token, v.body)
				if code != bad.want {
					t.Fatalf("%s: status %d, want %d (%s)", bad.name, code, bad.want, data)
				}
				if bad.want == 404 && errorOf(t, data) != "unknown sandbox" {
					t.Fatalf("%s: 404 body %s must not differ from an unknown id's", bad.name, data)
				}
			}
			code, _, _ := h.call(v.method, "/v1/sandboxes/sb_0000000000000000"+v.suffix, sb.Token, v.body)
			if code != 404 {
				t.Fatalf("unknown id: %d", code)
			}
			wantRoot := 404
			if v.rootOK {
				wantRoot = v.ok
			}
			if code, data, _ := h.call(v.method, path, rootToken, v.body); code != wantRoot {
				t.Fatalf("root: status %d, want %d (%s)", code, wantRoot, data)
			}
			if !v.rootOK || v.name != "release" {
				h.must(v.ok, v.method, path, sb.Token, v.body)
			}
		})
	}
	// The relay is a sandbox verb too, root not accepted.
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	for _, tok := range []string{rootToken, other.Token} {
		if code := relayStatus(t, h, sb.ID, 7, tok); code != 404 {
			t.Fatalf("relay with a foreign token: %d", code)
		}
	}
}

// TestAuthTenantScope: a tenant lists only its own sandboxes and checkpoints and cannot touch
// another tenant's checkpoint; root sees everything; GET shows the token to root only.
func TestAuthTenantScope(t *testing.T) {
	h := newHarness(t)
	a := h.claim(tenantA, sandbox.ClaimRequest{ClaimRef: "a"})
	b := h.claim(tenantB, sandbox.ClaimRequest{ClaimRef: "b"})
	if rows := h.list(tenantA, ""); len(rows) != 1 || rows[0].ID != a.ID || rows[0].Token != "" {
		t.Fatalf("tenant a sees %+v", rows)
	}
	if rows := h.list(rootToken, ""); len(rows) != 2 {
		t.Fatalf("root sees %+v", rows)
	}
	if rows := h.list(tenantA, "?claim_ref=b"); len(rows) != 0 {
		t.Fatalf("tenant a finds b's claim_ref: %+v", rows)
	}
	if got := h.row(a.ID); got.Token != a.Token {
		t.Fatalf("root GET token %q, want the sandbox token", got.Token)
	}
	ck := decodeAs[sandbox.CheckpointResponse](t, h.must(200, "POST", "/v1/sandboxes/"+a.ID+"/checkpoint", tenantA,
		sandbox.CheckpointRequest{Token: a.Token})).Checkpoint
	// Tenant b neither sees nor uses a's checkpoint, and cannot checkpoint a's sandbox with its own token.
	if cks := decodeAs[sandbox.CheckpointList](t, h.must(200, "GET", "/v1/checkpoints", tenantB, nil)); len(cks.Checkpoints) != 0 {
		t.Fatalf("tenant b sees %+v", cks)
	}
	h.must(404, "POST", "/v1/checkpoints/"+ck.ID+"/claim", tenantB, nil)
	h.must(404, "DELETE", "/v1/checkpoints/"+ck.ID, tenantB, nil)
	h.must(404, "POST", "/v1/sandboxes/"+a.ID+"/checkpoint", tenantB, sandbox.CheckpointRequest{Token: b.Token})
	h.must(200, "POST", "/v1/checkpoints/"+ck.ID+"/claim", tenantA, nil)
	if cks := decodeAs[sandbox.CheckpointList](t, h.must(200, "GET", "/v1/checkpoints", rootToken, nil)); len(cks.Checkpoints) != 1 {
		t.Fatalf("root sees %+v", cks)
	}
}

// TestAuthOpenEngine: with no tokens configured, node endpoints are open, sandbox verbs still
// need the sandbox token, and GET never shows a token.
func TestAuthOpenEngine(t *testing.T) {
	h := newHarness(t, func(o *engine.Options) { o.RootToken, o.TenantTokens = "", nil })
	sb := h.claim("", sandbox.ClaimRequest{})
	h.must(200, "GET", "/v1/info", "", nil)
	h.must(200, "GET", "/metrics", "", nil)
	if got := decodeAs[sandbox.Sandbox](t, h.must(200, "GET", "/v1/sandboxes/"+sb.ID, "", nil)); got.Token != "" {
		t.Fatalf("open engine revealed a token: %+v", got)
	}
	h.must(401, "POST", "/v1/sandboxes/"+sb.ID+"/hibernate", "", nil)
	h.must(404, "POST", "/v1/sandboxes/"+sb.ID+"/hibernate", "guess", nil)
	h.must(204, "POST", "/v1/sandboxes/"+sb.ID+"/hibernate", sb.Token, nil)
}

func TestNewRejectsBadTokens(t *testing.T) {
	for _, tc := range []struct {
		name    string
		root    string
		tenants []string
	}{
		{"empty tenant", "r", []string{""}},
		{"tenant equals root", "r", []string{"r"}},
		{"duplicate tenants", "r", []string{"t", "t"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := engine.New(engine.Options{
				Dir: t.TempDir(), Runtime: enginetest.New(), RootToken: tc.root, TenantTokens: tc.tenants,
				Images: func(string) (string, error) { return "/", nil },
			})
			if err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}
