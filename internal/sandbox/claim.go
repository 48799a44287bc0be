package sandbox

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// Claims are not idempotent: every accepted POST /v1/claim creates a sandbox, and an answer lost
// on the way back (a reset connection, a proxy timeout, a worker that died mid-call) leaves one
// running that nobody holds. Claim therefore never posts without first listing by claim_ref, on
// its first attempt (an earlier activity attempt may have succeeded) and before every retry.
//
// Adopting needs the sandbox's token, and listings never carry tokens. The only way to get it back
// is GET /v1/sandboxes/{id}, which answers it to the configured root token — cocoonbox's worker
// holds that token, so adoption is the normal path. When the row cannot be had with its token (a
// tenant token gets 403; a node without an api_token never returns tokens), the orphan is released
// best-effort (root may release by id) and a fresh sandbox is claimed under the same claim_ref;
// an orphan that cannot be released either is left to its lease, at most one per lost answer.
//
// When several sandboxes carry the claim_ref (earlier lost answers), the newest is adopted and the
// others are released.

// claimAttempts bounds the posts one Claim call makes after answers that may have been lost.
const claimAttempts = 3

// Claim implements Client.
func (c *HTTP) Claim(ctx context.Context, req ClaimRequest) (Claimed, error) {
	return c.ClaimOn(ctx, "", req)
}

// ClaimOn implements NodeClaimer: Claim on the engine at addr. The sandbox's Addr is addr, or
// empty when addr is the base URL's engine.
func (c *HTTP) ClaimOn(ctx context.Context, addr string, req ClaimRequest) (Claimed, error) {
	const op = "claim"
	if req.ClaimRef == "" {
		return Claimed{}, invalid(op, "claim_ref is required: a claim is not idempotent, and claim_ref is how a lost answer is found")
	}
	if c.isBase(addr) {
		addr = ""
	} else {
		req.NoRedirect = true // the node was chosen: it answers for itself
	}
	var lastErr error
	for attempt := 1; ; attempt++ {
		got, found, err := c.adopt(ctx, addr, req.ClaimRef)
		if err != nil {
			return Claimed{}, err // without a listing, a post could make a second sandbox
		}
		if found {
			return got, nil
		}
		if attempt > claimAttempts {
			return Claimed{}, lastErr
		}
		got, err = c.claimAt(ctx, addr, req)
		if err == nil || !uncertain(err) {
			return got, err
		}
		lastErr = err
		wait, ok := backoff(attempt, err)
		if !ok || sleep(ctx, wait) != nil {
			return Claimed{}, err // the caller's next Claim lists before posting
		}
	}
}

// Adopt implements NodeClaimer: the sandbox claimed under ref on the engine at addr, with its
// token, if there is one this client can hold.
func (c *HTTP) Adopt(ctx context.Context, addr, ref string) (Claimed, bool, error) {
	if c.isBase(addr) {
		addr = ""
	}
	return c.adopt(ctx, addr, ref)
}

// isBase reports whether addr names the base URL's engine (or is empty).
func (c *HTTP) isBase(addr string) bool {
	if addr == "" {
		return true
	}
	u, err := c.nodeURL(addr)
	return err == nil && c.base != nil && u.Scheme == c.base.Scheme && u.Host == c.base.Host
}

// claimAt posts one claim to the engine at addr (the base URL when empty) and follows a redirect
// answer.
func (c *HTTP) claimAt(ctx context.Context, addr string, req ClaimRequest) (Claimed, error) {
	const op = "claim"
	post := func(addr string, r ClaimRequest) (ClaimResponse, error) {
		var out ClaimResponse
		err := c.do(ctx, call{op: op, method: http.MethodPost, addr: addr, path: "/v1/claim", token: c.token, body: r, out: &out})
		return out, err
	}
	resp, err := post(addr, req)
	if err != nil {
		return Claimed{}, err
	}
	if len(resp.Redirect) == 0 {
		return claimed(op, addr, resp)
	}
	req.NoRedirect, req.RequirePromoted = true, resp.RequirePromoted
	return c.follow(op, resp.Redirect,
		func(addr string) (ClaimResponse, error) { return post(addr, req) },
		func(addr string) (Claimed, bool, error) { return c.adopt(ctx, addr, req.ClaimRef) })
}

// ClaimFromCheckpoint implements Client.
func (c *HTTP) ClaimFromCheckpoint(ctx context.Context, checkpointID string, ttl time.Duration, claimRef string) (Claimed, error) {
	op := "claim from checkpoint " + checkpointID
	path := "/v1/checkpoints/" + url.PathEscape(checkpointID) + "/claim"
	post := func(addr string, r CheckpointClaimRequest) (ClaimResponse, error) {
		var out ClaimResponse
		err := c.do(ctx, call{op: op, method: http.MethodPost, addr: addr, path: path, token: c.token, body: r, out: &out})
		return out, err
	}
	req := CheckpointClaimRequest{TTLSeconds: ttlSeconds(ttl), ClaimRef: claimRef}
	resp, err := post("", req)
	if err != nil {
		return Claimed{}, err
	}
	if len(resp.Redirect) == 0 {
		return claimed(op, "", resp)
	}
	req.NoRedirect = true
	return c.follow(op, resp.Redirect, func(addr string) (ClaimResponse, error) { return post(addr, req) }, nil)
}

// follow re-posts a redirected claim (the body already has no_redirect set) to each target in
// turn, then once to the origin, which with no_redirect answers for itself. A target whose answer
// may have been lost is checked with lost (adopt by claim_ref on that node) before moving on, so a
// claim that did land there is not made twice.
func (c *HTTP) follow(op string, targets []string, post func(addr string) (ClaimResponse, error),
	lost func(addr string) (Claimed, bool, error)) (Claimed, error) {
	var lastErr error
	for _, addr := range append(slices.Clone(targets), "") {
		resp, err := post(addr)
		if err == nil && len(resp.Redirect) > 0 {
			err = &Error{Op: op, Status: http.StatusOK, Message: "redirected again although no_redirect was set", Kind: ErrUnavailable}
		} else if err == nil {
			return claimed(op, addr, resp)
		}
		if uncertain(err) && lost != nil {
			got, found, lerr := lost(addr)
			if lerr != nil {
				return Claimed{}, err // cannot tell whether it landed: stop rather than risk a second
			}
			if found {
				return got, nil
			}
		}
		if !tryNextTarget(err) {
			return Claimed{}, err
		}
		lastErr = err
	}
	return Claimed{}, lastErr
}

// tryNextTarget reports whether a failure at one redirect target is worth trying another: a lost
// answer, an unusable address, a miss, a full node, a failing one, or a token the target does not
// know yet. A 400, 403 or 409 would be the same everywhere.
func tryNextTarget(err error) bool {
	e, ok := errors.AsType[*Error](err)
	if !ok {
		return true
	}
	switch e.Status {
	case 0, http.StatusOK, http.StatusUnauthorized, http.StatusNotFound, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// claimed checks a claim answer names a sandbox.
func claimed(op, addr string, r ClaimResponse) (Claimed, error) {
	if r.ID == "" || r.Token == "" {
		return Claimed{}, &Error{Op: op, Status: http.StatusOK, Message: "answer names no sandbox", Kind: ErrInternal}
	}
	return Claimed{
		SandboxRef: SandboxRef{ID: r.ID, Token: r.Token, Addr: addr},
		Deadline:   r.Deadline,
		OwnerAddr:  r.OwnerAddr,
		Start:      r.Start,
	}, nil
}

// adopt finds a sandbox claimed under ref on the node at addr and returns it with its token;
// found is false when there is none this client can hold (see the comment at the top).
func (c *HTTP) adopt(ctx context.Context, addr, ref string) (got Claimed, found bool, err error) {
	rows, err := c.listAt(ctx, addr, ref)
	if err != nil {
		return Claimed{}, false, err
	}
	// Filter again: an engine that ignored the query would otherwise hand us someone else's box.
	rows = slices.DeleteFunc(rows, func(s Sandbox) bool { return s.ClaimRef != ref })
	if len(rows) == 0 {
		return Claimed{}, false, nil
	}
	slices.SortFunc(rows, func(a, b Sandbox) int {
		return cmp.Or(b.ClaimedAt.Compare(a.ClaimedAt), b.Deadline.Compare(a.Deadline))
	})
	keep := -1
scan:
	for i, row := range rows {
		full, err := c.getAt(ctx, addr, row.ID)
		switch {
		case errors.Is(err, ErrNotFound):
			continue // released or reaped since the listing
		case errors.Is(err, ErrForbidden), errors.Is(err, ErrUnauthorized), err == nil && full.Token == "":
			// This client cannot learn tokens: nothing here is adoptable.
		case err != nil:
			return Claimed{}, false, err
		default:
			keep, got = i, Claimed{
				SandboxRef: SandboxRef{ID: full.ID, Token: full.Token, Addr: addr},
				Deadline:   full.Deadline,
				Adopted:    true,
			}
		}
		break scan
	}
	for i, row := range rows {
		if i != keep {
			// Best effort: root may release by id; for anyone else the lease reaps it.
			_ = c.Release(ctx, SandboxRef{ID: row.ID, Addr: addr})
		}
	}
	return got, keep >= 0, nil
}
