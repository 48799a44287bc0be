package sandboxtest

import (
	"net/http"
	"strings"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// The contract's auth rules: root does everything; tenants create and see their own; root-only
// endpoints answer a tenant 403; an unknown or missing token is 401; a wrong sandbox token is 404
// so it does not reveal that the sandbox exists; with no tokens configured node endpoints are open
// but sandbox tokens still guard sandbox verbs.

// caller is who made a node-level call.
type caller struct {
	root   bool   // presented the configured root token
	open   bool   // no tokens are configured: node endpoints are open
	tenant string // presented a tenant token
}

func (f *Fake) tokensConfigured() bool {
	return f.opts.RootToken != "" || len(f.opts.Tenants) > 0
}

func bearer(r *http.Request) (string, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	tok = strings.TrimSpace(tok)
	return tok, ok && tok != ""
}

// node authenticates a node-level call; false means it has answered already.
func (f *Fake) node(w http.ResponseWriter, r *http.Request) (caller, bool) {
	if !f.tokensConfigured() {
		return caller{open: true}, true
	}
	tok, ok := bearer(r)
	switch {
	case !ok:
		writeError(w, http.StatusUnauthorized, "missing bearer token")
	case f.opts.RootToken != "" && tok == f.opts.RootToken:
		return caller{root: true}, true
	case f.opts.Tenants[tok] != "":
		return caller{tenant: f.opts.Tenants[tok]}, true
	default:
		writeError(w, http.StatusUnauthorized, "unknown token")
	}
	return caller{}, false
}

// rootOnly authenticates a root-only call.
func (f *Fake) rootOnly(w http.ResponseWriter, r *http.Request) bool {
	c, ok := f.node(w, r)
	if !ok {
		return false
	}
	if !c.root && !c.open {
		writeError(w, http.StatusForbidden, sandbox.MsgOperatorRequired)
		return false
	}
	return true
}

// owned finds the sandbox named in the path for a sandbox verb, accepting its own token and, when
// rootOK, the root token.
func (f *Fake) owned(w http.ResponseWriter, r *http.Request, rootOK bool) (*sbx, bool) {
	tok, ok := bearer(r)
	if !ok {
		writeError(w, http.StatusUnauthorized, "missing bearer token")
		return nil, false
	}
	f.mu.Lock()
	s := f.sandboxes[r.PathValue("id")]
	f.mu.Unlock()
	if s == nil || tok != s.token && !(rootOK && f.opts.RootToken != "" && tok == f.opts.RootToken) {
		writeError(w, http.StatusNotFound, "sandbox not found")
		return nil, false
	}
	return s, true
}

// visible reports whether c may see something a tenant created ("" for root).
func (c caller) visible(tenant string) bool {
	return c.root || c.open || c.tenant == tenant
}
