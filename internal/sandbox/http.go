package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

var (
	_ Client             = (*HTTP)(nil)
	_ DiskPorter         = (*HTTP)(nil)
	_ EgressSetter       = (*HTTP)(nil)
	_ NodeClaimer        = (*HTTP)(nil)
	_ NodeDialer         = (*HTTP)(nil)
	_ MemoryCheckpointer = (*HTTP)(nil)
)

// HTTP is the Client of the sandboxd HTTP API. It is safe for concurrent use.
type HTTP struct {
	base    *url.URL
	baseErr error // a bad base URL fails every call rather than panicking in a constructor
	token   string
	hc      *http.Client
}

// NewHTTP returns a client of the engine at baseURL (e.g. "http://127.0.0.1:7777") that presents
// token (root or tenant; "" for none) on node-level verbs. hc carries the caller's transport and
// timeouts; nil means NewHTTPClient(). http.DefaultClient is never used.
func NewHTTP(baseURL, token string, hc *http.Client) *HTTP {
	if hc == nil {
		hc = NewHTTPClient()
	}
	c := &HTTP{token: token, hc: hc}
	c.base, c.baseErr = parseOrigin(baseURL)
	return c
}

// NewHTTPClient returns the http.Client NewHTTP uses by default: connecting and the TLS handshake
// are bounded, the whole call is not, because a cold claim or a long exec legitimately takes
// minutes. Bound each call with its context (activities have start-to-close timeouts).
func NewHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   16,
			ExpectContinueTimeout: time.Second,
		},
		// Engines never redirect with 3xx; a claim redirect is a 200 body. Do not follow.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// parseOrigin accepts an http(s) origin, or host:port meaning http.
func parseOrigin(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	// A bad address is the caller's (or a redirect's) mistake: ErrInvalid, never retried.
	u, err := url.Parse(strings.TrimRight(s, "/"))
	if err != nil {
		return nil, &Error{Op: "parse engine address", Message: err.Error(), Kind: ErrInvalid}
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, &Error{Op: "parse engine address", Message: fmt.Sprintf("%q is not an http(s) origin or host:port", s), Kind: ErrInvalid}
	}
	return u, nil
}

// At returns a client of the engine at addr with the same token and transport (see NodeDialer);
// a bad addr fails each of its calls.
func (c *HTTP) At(addr string) Client {
	if c.isBase(addr) {
		return c
	}
	at := &HTTP{token: c.token, hc: c.hc}
	at.base, at.baseErr = c.nodeURL(addr)
	return at
}

// nodeURL resolves a SandboxRef.Addr (or a redirect target) against the base URL: a bare
// host:port takes the base URL's scheme.
func (c *HTTP) nodeURL(addr string) (*url.URL, error) {
	if c.baseErr != nil {
		return nil, c.baseErr
	}
	if addr == "" {
		return c.base, nil
	}
	if !strings.Contains(addr, "://") {
		addr = c.base.Scheme + "://" + addr
	}
	return parseOrigin(addr)
}

// call is one JSON request.
type call struct {
	op     string // for errors: "release sb_…"
	method string
	addr   string // node: "" for the base URL
	path   string // already escaped
	query  url.Values
	token  string
	body   any   // nil: no body
	out    any   // nil: discard the answer
	ok     []int // success statuses; nil means 200
}

// maxResponseBody bounds a decoded answer: an exec result is at most 8 MiB of output, which JSON
// escaping can inflate up to six times.
const maxResponseBody = 64 << 20

func (c *HTTP) do(ctx context.Context, k call) error {
	u, err := c.nodeURL(k.addr)
	if err != nil {
		return err
	}
	target := u.String() + k.path
	if len(k.query) > 0 {
		target += "?" + k.query.Encode()
	}
	var body io.Reader
	if k.body != nil {
		b, err := json.Marshal(k.body)
		if err != nil {
			return fmt.Errorf("sandbox: %s: encode request: %w", k.op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, target, body)
	if err != nil {
		return fmt.Errorf("sandbox: %s: %w", k.op, err)
	}
	if k.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	setBearer(req.Header, k.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("sandbox: %s: %w", k.op, err)
	}
	defer func() {
		// Reading to the end lets the connection be reused; claims and execs are latency-bound.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		_ = resp.Body.Close()
	}()
	ok := k.ok
	if ok == nil {
		ok = []int{http.StatusOK}
	}
	if !slices.Contains(ok, resp.StatusCode) {
		return statusError(k.op, resp)
	}
	if k.out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponseBody)).Decode(k.out); err != nil {
			return fmt.Errorf("sandbox: %s: decode answer: %w", k.op, err)
		}
	}
	return nil
}

func setBearer(h http.Header, token string) {
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
}

// Retries of the verbs the contract calls safe to repeat (release, hibernate, wake, renew and
// the reads): a few quick attempts on a lost answer or a 502/503, waiting as long as Retry-After
// says when that is short. Longer waits and everything else go back to the caller, whose retry
// policy (Temporal's, for activities) knows more.
const (
	retryAttempts = 3
	retryBase     = 100 * time.Millisecond
	maxRetryWait  = 5 * time.Second
)

func (c *HTTP) retry(ctx context.Context, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || attempt >= retryAttempts || ctx.Err() != nil || !transient(err) {
			return err
		}
		wait, ok := backoff(attempt, err)
		if !ok {
			return err
		}
		if sleep(ctx, wait) != nil {
			return err
		}
	}
}

// transient reports whether repeating the same safe call soon may succeed.
func transient(err error) bool {
	e, ok := errors.AsType[*Error](err)
	if !ok {
		return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	}
	return errors.Is(e.Kind, ErrUnavailable)
}

// backoff is the wait before attempt+1: the engine's Retry-After when it sent one and it is short
// enough to wait here (ok false otherwise), else exponential from retryBase.
func backoff(attempt int, err error) (time.Duration, bool) {
	if ra := RetryAfter(err); ra > 0 {
		return ra, ra <= maxRetryWait
	}
	return retryBase << (attempt - 1), true
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// sandboxToken is the credential for a verb on sb: its own token, else the node token (root may
// act by id on release, hibernate, wake and renew).
func (c *HTTP) sandboxToken(sb SandboxRef) string {
	if sb.Token != "" {
		return sb.Token
	}
	return c.token
}

func sandboxPath(id, verb string) string {
	p := "/v1/sandboxes/" + url.PathEscape(id)
	if verb != "" {
		p += "/" + verb
	}
	return p
}

// ttlSeconds converts a lease to the wire's whole seconds, rounding up so a caller never gets
// less than asked; a negative ttl stays negative for the engine to refuse.
func ttlSeconds(d time.Duration) int {
	s := int(d / time.Second)
	if d%time.Second > 0 {
		s++
	} else if d < 0 && s == 0 {
		s = -1
	}
	return s
}

// List implements Client.
func (c *HTTP) List(ctx context.Context, claimRef string) ([]Sandbox, error) {
	return c.listAt(ctx, "", claimRef)
}

func (c *HTTP) listAt(ctx context.Context, addr, claimRef string) ([]Sandbox, error) {
	var q url.Values
	if claimRef != "" {
		q = url.Values{"claim_ref": {claimRef}}
	}
	var out SandboxList
	err := c.retry(ctx, func() error {
		return c.do(ctx, call{op: "list sandboxes", method: http.MethodGet, addr: addr,
			path: "/v1/sandboxes", query: q, token: c.token, out: &out})
	})
	return out.Sandboxes, err
}

// Get implements Client.
func (c *HTTP) Get(ctx context.Context, id string) (Sandbox, error) {
	return c.getAt(ctx, "", id)
}

func (c *HTTP) getAt(ctx context.Context, addr, id string) (Sandbox, error) {
	var out Sandbox
	err := c.retry(ctx, func() error {
		return c.do(ctx, call{op: "get " + id, method: http.MethodGet, addr: addr,
			path: sandboxPath(id, ""), token: c.token, out: &out})
	})
	return out, err
}

// Release implements Client.
func (c *HTTP) Release(ctx context.Context, sb SandboxRef) error {
	err := c.retry(ctx, func() error {
		return c.do(ctx, call{op: "release " + sb.ID, method: http.MethodPost, addr: sb.Addr,
			path: sandboxPath(sb.ID, "release"), token: c.sandboxToken(sb), ok: []int{http.StatusNoContent}})
	})
	if errors.Is(err, ErrNotFound) {
		return nil // gone already, perhaps by our own earlier attempt whose answer was lost
	}
	return err
}

// Hibernate implements Client.
func (c *HTTP) Hibernate(ctx context.Context, sb SandboxRef) error {
	return c.retry(ctx, func() error {
		return c.do(ctx, call{op: "hibernate " + sb.ID, method: http.MethodPost, addr: sb.Addr,
			path: sandboxPath(sb.ID, "hibernate"), token: c.sandboxToken(sb), ok: []int{http.StatusNoContent}})
	})
}

// Wake implements Client.
func (c *HTTP) Wake(ctx context.Context, sb SandboxRef) error {
	return c.retry(ctx, func() error {
		return c.do(ctx, call{op: "wake " + sb.ID, method: http.MethodPost, addr: sb.Addr,
			path: sandboxPath(sb.ID, "wake"), token: c.sandboxToken(sb), ok: []int{http.StatusNoContent}})
	})
}

// Renew implements Client.
func (c *HTTP) Renew(ctx context.Context, sb SandboxRef, ttl time.Duration) (time.Time, error) {
	var out RenewResponse
	err := c.retry(ctx, func() error {
		return c.do(ctx, call{op: "renew " + sb.ID, method: http.MethodPost, addr: sb.Addr,
			path: sandboxPath(sb.ID, "renew"), token: c.sandboxToken(sb),
			body: RenewRequest{TTLSeconds: ttlSeconds(ttl)}, out: &out})
	})
	return out.Deadline, err
}

// SetEgress implements EgressSetter; replacing a policy is idempotent, so it is retried.
func (c *HTTP) SetEgress(ctx context.Context, sb SandboxRef, p EgressPolicy) error {
	return c.retry(ctx, func() error {
		return c.do(ctx, call{op: "set egress " + sb.ID, method: http.MethodPut, addr: sb.Addr,
			path: sandboxPath(sb.ID, "egress"), token: c.sandboxToken(sb), body: p, ok: []int{http.StatusNoContent}})
	})
}

// Exec implements Client. It is never retried: the command may have run.
func (c *HTTP) Exec(ctx context.Context, sb SandboxRef, req ExecRequest) (ExecResult, error) {
	var out ExecResult
	err := c.do(ctx, call{op: "exec " + sb.ID, method: http.MethodPost, addr: sb.Addr,
		path: sandboxPath(sb.ID, "exec"), token: c.sandboxToken(sb), body: req, out: &out})
	return out, err
}

// Checkpoint implements Client. The node token goes in the header and the sandbox token in the
// body, as the contract wants; it is not retried because each call makes a checkpoint.
func (c *HTTP) Checkpoint(ctx context.Context, sb SandboxRef, name string) (Checkpoint, error) {
	var out CheckpointResponse
	err := c.do(ctx, call{op: "checkpoint " + sb.ID, method: http.MethodPost, addr: sb.Addr,
		path: sandboxPath(sb.ID, "checkpoint"), token: c.token,
		body: CheckpointRequest{Token: sb.Token, Name: name}, out: &out})
	return out.Checkpoint, err
}

// CheckpointMemory implements MemoryCheckpointer.
func (c *HTTP) CheckpointMemory(ctx context.Context, sb SandboxRef, name string) (Checkpoint, error) {
	var out CheckpointResponse
	err := c.do(ctx, call{op: "checkpoint " + sb.ID + " with memory", method: http.MethodPost, addr: sb.Addr,
		path: sandboxPath(sb.ID, "checkpoint"), token: c.token,
		body: CheckpointRequest{Token: sb.Token, Name: name, Memory: true}, out: &out})
	return out.Checkpoint, err
}

// ListCheckpoints implements Client.
func (c *HTTP) ListCheckpoints(ctx context.Context) ([]Checkpoint, error) {
	var out CheckpointList
	err := c.retry(ctx, func() error {
		return c.do(ctx, call{op: "list checkpoints", method: http.MethodGet, path: "/v1/checkpoints",
			token: c.token, out: &out})
	})
	return out.Checkpoints, err
}

// ExportCheckpointDisk streams checkpoint id's disk into w and returns what the engine reported
// at the end; with base (an earlier export's index, CheckpointDiskIndex) the stream is
// incremental against it. It fails when the stream ends without its trailers (the engine failed
// mid-way) or when the bytes received do not match them. Only engines whose Info has DiskExport
// serve it, and IncrementalDisk a base.
func (c *HTTP) ExportCheckpointDisk(ctx context.Context, id string, base io.Reader, w io.Writer) (DiskExport, error) {
	op := "export checkpoint " + id
	method := http.MethodGet
	if base != nil {
		method = http.MethodPost
	}
	resp, err := c.stream(ctx, op, method, "/v1/checkpoints/"+url.PathEscape(id)+"/disk", base, nil)
	if err != nil {
		return DiskExport{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), resp.Body)
	if err != nil {
		return DiskExport{}, fmt.Errorf("sandbox: %s: %w", op, err)
	}
	out := DiskExport{SHA256: resp.Trailer.Get(TrailerSHA256)}
	out.Bytes, _ = strconv.ParseInt(resp.Trailer.Get(TrailerBytes), 10, 64)
	out.Files, _ = strconv.ParseInt(resp.Trailer.Get(TrailerFiles), 10, 64)
	out.Deleted, _ = strconv.ParseInt(resp.Trailer.Get(TrailerDeleted), 10, 64)
	switch got := hex.EncodeToString(h.Sum(nil)); {
	case out.SHA256 == "":
		return DiskExport{}, fmt.Errorf("sandbox: %s: the stream ended without its checksum: the engine failed mid-way", op)
	case got != out.SHA256 || n != out.Bytes:
		return DiskExport{}, fmt.Errorf("sandbox: %s: received %d bytes with sha256 %s, engine sent %d with %s", op, n, got, out.Bytes, out.SHA256)
	}
	return out, nil
}

// CheckpointSince implements DiskPorter. Not retried: base is consumed.
func (c *HTTP) CheckpointSince(ctx context.Context, sb SandboxRef, name string, base io.Reader) (Checkpoint, error) {
	op := "checkpoint " + sb.ID + " since an export"
	q := ""
	if name != "" {
		q = "?" + url.Values{"name": {name}}.Encode()
	}
	hdr := http.Header{}
	if sb.Token != "" {
		hdr.Set(HeaderSandboxToken, sb.Token)
	}
	var out CheckpointResponse
	err := c.postJSON(ctx, sb.Addr, op, sandboxPath(sb.ID, "checkpoint/since")+q, base, hdr, &out)
	return out.Checkpoint, err
}

// CheckpointDiskIndex copies the index the last export of checkpoint id wrote into w and
// returns its size: the base of the next incremental export.
func (c *HTTP) CheckpointDiskIndex(ctx context.Context, id string, w io.Writer) (int64, error) {
	op := "read the disk index of checkpoint " + id
	resp, err := c.stream(ctx, op, http.MethodGet, "/v1/checkpoints/"+url.PathEscape(id)+"/disk/index", nil, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	n, err := io.Copy(w, resp.Body)
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return n, fmt.Errorf("sandbox: %s: %w", op, err)
	}
	return n, nil
}

// ImportCheckpointDisk makes a checkpoint on the engine from disk streams in the snapshot
// format: r holds layers' streams one after the other, oldest first (a full stream, then the
// incremental ones), each with its sha256 and size; one layer may leave its size unknown. Boxes
// claimed from it get key. The engine checks every sum before the checkpoint exists. Not
// retried: r is consumed.
func (c *HTTP) ImportCheckpointDisk(ctx context.Context, r io.Reader, layers []DiskExport, key PoolKey, name string) (Checkpoint, error) {
	op := "import checkpoint"
	q := url.Values{"template": {key.Template}, "net": {key.Net}, "size": {key.Size}}
	if name != "" {
		q.Set("name", name)
	}
	hdr, err := layersHeader(op, layers)
	if err != nil {
		return Checkpoint{}, err
	}
	var out CheckpointResponse
	err = c.postJSON(ctx, "", op, "/v1/checkpoints/import?"+q.Encode(), r, hdr, &out)
	return out.Checkpoint, err
}

// ImportClaim implements DiskPorter.
func (c *HTTP) ImportClaim(ctx context.Context, r io.Reader, layers []DiskExport, key PoolKey, ttl time.Duration, claimRef string) (Claimed, error) {
	op := "claim from an imported disk"
	q := url.Values{"template": {key.Template}, "net": {key.Net}, "size": {key.Size}}
	if s := ttlSeconds(ttl); s > 0 {
		q.Set("ttl_seconds", strconv.Itoa(s))
	}
	if claimRef != "" {
		q.Set("claim_ref", claimRef)
	}
	hdr, err := layersHeader(op, layers)
	if err != nil {
		return Claimed{}, err
	}
	var out ClaimResponse
	if err := c.postJSON(ctx, "", op, "/v1/sandboxes/import?"+q.Encode(), r, hdr, &out); err != nil {
		return Claimed{}, err
	}
	return claimed(op, "", out)
}

// postJSON posts body as a stream to the engine at addr and decodes its JSON answer into out.
func (c *HTTP) postJSON(ctx context.Context, addr, op, path string, body io.Reader, hdr http.Header, out any) error {
	resp, err := c.streamAt(ctx, addr, op, http.MethodPost, path, body, hdr)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponseBody)).Decode(out); err != nil {
		return fmt.Errorf("sandbox: %s: decode answer: %w", op, err)
	}
	return nil
}

// layersHeader names an import's streams: the one stream's sha256 (and size when known), or
// each layer of a chain as "sha256:bytes".
func layersHeader(op string, layers []DiskExport) (http.Header, error) {
	hdr := http.Header{}
	switch {
	case len(layers) == 0:
		return nil, fmt.Errorf("sandbox: %s: no layers", op)
	case len(layers) == 1:
		hdr.Set(TrailerSHA256, layers[0].SHA256)
		if layers[0].Bytes > 0 {
			hdr.Set(TrailerBytes, strconv.FormatInt(layers[0].Bytes, 10))
		}
	default:
		parts := make([]string, len(layers))
		for i, l := range layers {
			parts[i] = l.SHA256 + ":" + strconv.FormatInt(l.Bytes, 10)
		}
		hdr.Set(HeaderLayers, strings.Join(parts, ","))
	}
	return hdr, nil
}

// stream sends one unretried node request whose body (nil for none) and answer are streams, and
// returns the answer when it is 200; the caller closes its body.
func (c *HTTP) stream(ctx context.Context, op, method, path string, body io.Reader, hdr http.Header) (*http.Response, error) {
	return c.streamAt(ctx, "", op, method, path, body, hdr)
}

// streamAt is stream on the engine at addr (SandboxRef.Addr).
func (c *HTTP) streamAt(ctx context.Context, addr, op, method, path string, body io.Reader, hdr http.Header) (*http.Response, error) {
	u, err := c.nodeURL(addr)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String()+path, body)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %s: %w", op, err)
	}
	maps.Copy(req.Header, hdr)
	setBearer(req.Header, c.token)
	if body != nil {
		req.Header.Set("Content-Type", DiskExportContentType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %s: %w", op, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer func() { _ = resp.Body.Close() }()
		return nil, statusError(op, resp)
	}
	return resp, nil
}

// DeleteCheckpoint implements Client.
func (c *HTTP) DeleteCheckpoint(ctx context.Context, id string) error {
	return c.retry(ctx, func() error {
		return c.do(ctx, call{op: "delete checkpoint " + id, method: http.MethodDelete,
			path: "/v1/checkpoints/" + url.PathEscape(id), token: c.token, ok: []int{http.StatusNoContent}})
	})
}

// Info implements Client.
func (c *HTTP) Info(ctx context.Context) (Info, error) {
	var out Info
	err := c.retry(ctx, func() error {
		return c.do(ctx, call{op: "info", method: http.MethodGet, path: "/v1/info", token: c.token, out: &out})
	})
	return out, err
}

// Stats implements Client.
func (c *HTTP) Stats(ctx context.Context, id string) (Stats, error) {
	var out Stats
	err := c.retry(ctx, func() error {
		return c.do(ctx, call{op: "stats " + id, method: http.MethodGet, path: sandboxPath(id, "stats"),
			token: c.token, out: &out})
	})
	return out, err
}

// SetPools implements Client. Replacing the whole set is idempotent, so it is retried.
func (c *HTTP) SetPools(ctx context.Context, pools []PoolSpec) (Info, error) {
	if pools == nil {
		pools = []PoolSpec{} // "pools": null is not "no pools"
	}
	var out Info
	err := c.retry(ctx, func() error {
		return c.do(ctx, call{op: "set pools", method: http.MethodPut, path: "/v1/pools", token: c.token,
			body: PoolsRequest{Pools: pools}, out: &out})
	})
	return out, err
}
