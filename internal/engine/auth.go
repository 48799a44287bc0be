package engine

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
)

// The contract's credentials:
//   - the root token (operator) may do everything;
//   - a tenant token may create resources (claim, checkpoint, claim from a checkpoint) and see
//     and delete its own; an operator-only endpoint answers it 403;
//   - a sandbox token (returned by claim) is the credential of sandbox verbs; the root token is
//     also accepted for release, hibernate, wake and renew. A wrong one answers 404, exactly like
//     an unknown sandbox, so a token never learns whether another sandbox exists.
// With no root and no tenant token, node-level endpoints are open. Every comparison is constant
// time.

// tenant is one tenant credential. id is a digest of the token: records name a sandbox's owner
// by it, so no tenant token is ever written to disk.
type tenant struct {
	token string
	id    string
}

func tenantsOf(root string, tokens []string) ([]tenant, error) {
	seen := map[string]bool{root: root != ""}
	out := make([]tenant, 0, len(tokens))
	for _, t := range tokens {
		if t == "" {
			return nil, errors.New("a tenant token is empty")
		}
		if seen[t] {
			return nil, errors.New("a tenant token repeats the root token or another tenant's")
		}
		seen[t] = true
		sum := sha256.Sum256([]byte(t))
		out = append(out, tenant{token: t, id: hex.EncodeToString(sum[:8])})
	}
	return out, nil
}

// caller is who made a node-level request.
type caller struct {
	root   bool   // presented the root token; false on an open engine
	tenant string // the tenant's id; "" for root and for an open engine
}

// sees reports whether the caller may see a resource owned by owner (a tenant id or "").
func (c caller) sees(owner string) bool { return c.tenant == "" || c.tenant == owner }

func (e *Engine) open() bool { return e.rootToken == "" && len(e.tenants) == 0 }

// bearer returns the token of "Authorization: Bearer <token>".
func bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

func equalTokens(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

func (e *Engine) isRoot(tok string) bool { return e.rootToken != "" && equalTokens(tok, e.rootToken) }

// resolve authenticates a node-level request.
func (e *Engine) resolve(r *http.Request) (caller, error) {
	if e.open() {
		return caller{}, nil
	}
	tok, ok := bearer(r)
	if !ok {
		return caller{}, errMissingToken
	}
	if e.isRoot(tok) {
		return caller{root: true}, nil
	}
	found := ""
	for _, t := range e.tenants { // no early exit: the time taken does not say which tenant
		if equalTokens(tok, t.token) {
			found = t.id
		}
	}
	if found == "" {
		return caller{}, errBadToken
	}
	return caller{tenant: found}, nil
}

// nodeHandler is a handler for a node-level endpoint, given its authenticated caller.
type nodeHandler func(w http.ResponseWriter, r *http.Request, c caller) error

// node guards an endpoint open to root and tenant tokens.
func (e *Engine) node(h nodeHandler) http.Handler {
	return e.plain(func(w http.ResponseWriter, r *http.Request) error {
		c, err := e.resolve(r)
		if err != nil {
			return err
		}
		return h(w, r, c)
	})
}

// operator guards a root-only endpoint: a tenant is known but not allowed (403, not 401).
func (e *Engine) operator(h nodeHandler) http.Handler {
	return e.node(func(w http.ResponseWriter, r *http.Request, c caller) error {
		if c.tenant != "" {
			return errOperatorOnly
		}
		return h(w, r, c)
	})
}

// absentToken is compared against when the sandbox does not exist, so an unknown id and a
// wrong token take the same time.
var absentToken = newSandboxToken()

// authorizeBox finds the sandbox a sandbox verb names and checks its bearer token. rootToo
// accepts the root token as well (release, hibernate, wake, renew).
func (e *Engine) authorizeBox(r *http.Request, rootToo bool) (*box, error) {
	tok, ok := bearer(r)
	if !ok {
		return nil, errMissingToken
	}
	return e.boxByToken(r.PathValue("id"), tok, rootToo && e.isRoot(tok))
}

// boxByToken returns the live sandbox id if tok is its token (or asOperator), else
// errUnknownSandbox.
func (e *Engine) boxByToken(id, tok string, asOperator bool) (*box, error) {
	b := e.lookup(id)
	if asOperator {
		if b == nil {
			return nil, errUnknownSandbox
		}
		return b, nil
	}
	want := absentToken
	if b != nil {
		b.mu.Lock()
		want = b.rec.Token
		b.mu.Unlock()
	}
	if !equalTokens(tok, want) || b == nil {
		return nil, errUnknownSandbox
	}
	return b, nil
}
