package engine_test

import (
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// TestBadInput sends every kind of bad request the contract names and checks the documented
// status, the {"error":…} body naming the problem, and that nothing changed: no box started or
// destroyed, no record or journal line written, no lease moved.
func TestBadInput(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(tenantA, sandbox.ClaimRequest{ClaimRef: "keep"})
	h.exec(sb, "write", "/root/f", "x")
	sbPath := "/v1/sandboxes/" + sb.ID
	huge := `{"template":"base","claim_ref":"` + strings.Repeat("x", 1<<20) + `"}`
	exact := sandbox.MsgInvalidBody

	cases := []struct {
		name, method, path, token string
		body                      any
		status                    int
		want                      string // the error message, or a part of it after "~"
	}{
		{"claim unknown size", "POST", "/v1/claim", tenantA, `{"template":"base","size":"huge"}`, 400, `~size: unknown size "huge"`},
		{"claim unknown template", "POST", "/v1/claim", tenantA, `{"template":"nope"}`, 400, `template: unknown template "nope"`},
		{"claim path-like template", "POST", "/v1/claim", tenantA, `{"template":"../etc"}`, 400, `template: unknown template "../etc"`},
		{"claim without template", "POST", "/v1/claim", tenantA, `{"size":"small"}`, 400, "template: is required"},
		{"claim egress lane", "POST", "/v1/claim", tenantA, `{"template":"base","net":"egress"}`, 400, `~"egress" is not available`},
		{"claim unknown lane", "POST", "/v1/claim", tenantA, `{"template":"base","net":"wifi"}`, 400, `~unknown lane "wifi"`},
		{"claim negative ttl", "POST", "/v1/claim", tenantA, `{"template":"base","ttl_seconds":-1}`, 400, "ttl_seconds: must not be negative, got -1"},
		{"claim malformed", "POST", "/v1/claim", tenantA, `{"template":`, 400, exact},
		{"claim wrong type", "POST", "/v1/claim", tenantA, `{"template":7}`, 400, exact},
		{"claim trailing data", "POST", "/v1/claim", tenantA, `{"template":"base"} {}`, 400, exact},
		{"claim empty body", "POST", "/v1/claim", tenantA, nil, 400, exact},
		{"claim oversized", "POST", "/v1/claim", tenantA, huge, 400, exact},
		{"renew negative ttl", "POST", sbPath + "/renew", sb.Token, `{"ttl_seconds":-5}`, 400, "ttl_seconds: must not be negative, got -5"},
		{"renew malformed", "POST", sbPath + "/renew", sb.Token, `{`, 400, exact},
		{"exec empty argv", "POST", sbPath + "/exec", sb.Token, `{"argv":[]}`, 400, "argv: must not be empty"},
		{"exec no argv", "POST", sbPath + "/exec", sb.Token, `{}`, 400, "argv: must not be empty"},
		{"exec unknown field", "POST", sbPath + "/exec", sb.Token, `{"argv":["echo"],"command":"echo"}`, 400, exact + `: unknown field "command"`},
		{"exec missing binary", "POST", sbPath + "/exec", sb.Token, `{"argv":["nosuch"]}`, 400, "~executable file not found"},
		{"exec bad cwd", "POST", sbPath + "/exec", sb.Token, `{"argv":["pwd"],"cwd":"/nowhere"}`, 400, `~cwd "/nowhere"`},
		{"exec relative cwd", "POST", sbPath + "/exec", sb.Token, `{"argv":["pwd"],"cwd":"root"}`, 400, `cwd: must be an absolute path, got "root"`},
		{"exec negative timeout", "POST", sbPath + "/exec", sb.Token, `{"argv":["echo"],"timeout_seconds":-1}`, 400, "~timeout_seconds"},
		{"exec bad env", "POST", sbPath + "/exec", sb.Token, `{"argv":["env"],"env":{"A=B":"c"}}`, 400, `env: bad variable name "A=B"`},
		{"exec oversized", "POST", sbPath + "/exec", sb.Token, `{"argv":["echo","` + strings.Repeat("y", 1<<20) + `"]}`, 400, exact},
		{"checkpoint bad name", "POST", sbPath + "/checkpoint", tenantA, `{"token":"` + sb.Token + `","name":"../x"}`, 400, `~name:`},
		{"checkpoint without token", "POST", sbPath + "/checkpoint", tenantA, `{}`, 400, "token: the sandbox's token is required"},
		{"checkpoint claim negative ttl", "POST", "/v1/checkpoints/ck_0000000000000000/claim", tenantA, `{"ttl_seconds":-1}`, 400, "~ttl_seconds"},
		{"pools unknown size", "PUT", "/v1/pools", rootToken, `{"pools":[{"template":"base","size":"tiny","warm":1}]}`, 400, `~pools[0]: size: unknown size "tiny"`},
		{"pools unknown template", "PUT", "/v1/pools", rootToken, `{"pools":[{"template":"nope","warm":1}]}`, 400, `pools[0]: template: unknown template "nope"`},
		{"pools negative warm", "PUT", "/v1/pools", rootToken, `{"pools":[{"template":"base","warm":-1}]}`, 400, "~pools[0]: warm"},
		{"pools duplicate", "PUT", "/v1/pools", rootToken, `{"pools":[{"template":"base","warm":1},{"template":"base","net":"none","size":"small","warm":2}]}`, 400, "~pools[1]: repeats"},
		{"pools unknown field", "PUT", "/v1/pools", rootToken, `{"pools":[],"extra":1}`, 400, exact + `: unknown field "extra"`},
		{"relay bad port", "GET", sbPath + "/ports/0", sb.Token, nil, 400, "~port:"},
		{"unknown endpoint", "GET", "/v1/nothing", rootToken, nil, 404, "no such endpoint"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := h.state()
			var code int
			var data []byte
			if strings.Contains(tc.path, "/ports/") {
				code, data = relayRaw(t, h, tc.path, tc.token)
			} else {
				code, data, _ = h.call(tc.method, tc.path, tc.token, tc.body)
			}
			if code != tc.status {
				t.Fatalf("status %d, want %d (%s)", code, tc.status, data)
			}
			msg := errorOf(t, data)
			if part, ok := strings.CutPrefix(tc.want, "~"); ok {
				if !strings.Contains(msg, part) {
					t.Fatalf("error %q does not contain %q", msg, part)
				}
			} else if msg != tc.want {
				t.Fatalf("error %q, want %q", msg, tc.want)
			}
			h.unchanged(before, tc.name)
		})
	}
	// The sandbox is intact after all of it.
	if got := h.exec(sb, "cat", "/root/f"); got.Stdout != "x" {
		t.Fatalf("file after bad input: %+v", got)
	}
}
