package sandboxtest

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// sizes are the contract's size tiers: vCPUs and memory.
var sizes = map[string]struct {
	cpus int
	mem  int64
}{
	sandbox.SizeSmall:   {1, 512 << 20},
	sandbox.SizeMedium:  {2, 1 << 30},
	sandbox.SizeLarge:   {4, 4 << 30},
	sandbox.SizeXLarge:  {4, 8 << 30},
	sandbox.Size2XLarge: {8, 16 << 30},
}

// poolKey validates and defaults a (template, net, size) triple; msg is the 400 text.
func (f *Fake) poolKey(template, net, size string) (key sandbox.PoolKey, msg string) {
	key = sandbox.PoolKey{Template: template, Net: net, Size: size}
	if key.Net == "" {
		key.Net = sandbox.NetNone
	}
	if key.Size == "" {
		key.Size = sandbox.SizeSmall
	}
	switch {
	case template == "":
		return key, "template is required"
	case !slices.Contains(f.opts.Templates, template):
		return key, fmt.Sprintf("unknown template %q", template)
	case key.Net != sandbox.NetNone && key.Net != sandbox.NetEgress:
		return key, fmt.Sprintf("unknown net %q", key.Net)
	}
	if _, ok := sizes[key.Size]; !ok {
		return key, fmt.Sprintf("unknown size %q", key.Size)
	}
	return key, ""
}

// lease turns ttl_seconds into a lease: 0 is the default, longer than the maximum is clamped.
func lease(seconds int) (time.Duration, string) {
	switch d := time.Duration(seconds) * time.Second; {
	case seconds < 0:
		return 0, "ttl_seconds must not be negative"
	case seconds == 0:
		return sandbox.DefaultTTL, ""
	case d > sandbox.MaxTTL:
		return sandbox.MaxTTL, ""
	default:
		return d, ""
	}
}

func (f *Fake) claim(w http.ResponseWriter, r *http.Request) {
	c, ok := f.node(w, r)
	if !ok {
		return
	}
	var req sandbox.ClaimRequest
	if !decode(w, r, &req, false, false) {
		return
	}
	f.mu.Lock()
	f.lastClaim = req
	f.mu.Unlock()
	key, msg := f.poolKey(req.Template, req.Net, req.Size)
	ttl, tmsg := lease(req.TTLSeconds)
	if msg = cmpOr(msg, tmsg); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	s, err := f.create(key, ttl, c.tenant, req.ClaimRef, "", "")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "provisioning failed: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, sandbox.ClaimResponse{ID: s.id, Token: s.token, Deadline: s.deadline,
		OwnerAddr: f.addr, FromCheckpoint: s.fromCheckpoint})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// create makes and starts a sandbox, seeding its disk from seed when set.
func (f *Fake) create(key sandbox.PoolKey, ttl time.Duration, tenant, ref, seed, fromCheckpoint string) (*sbx, error) {
	s := &sbx{id: "sb_" + randomHex(8), token: randomHex(16), tenant: tenant, claimRef: ref,
		fromCheckpoint: fromCheckpoint, key: key}
	dir := filepath.Join(f.dir, s.id)
	if seed != "" {
		if err := copyDisk(seed, dir); err != nil {
			return nil, err
		}
	}
	b, err := newBox(dir, f.isolated)
	if err != nil {
		return nil, err
	}
	if err := b.start(); err != nil {
		return nil, err
	}
	s.box = b
	now := time.Now().UTC()
	s.claimedAt, s.deadline = now, now.Add(ttl)
	f.mu.Lock()
	f.sandboxes[s.id] = s
	f.mu.Unlock()
	return s, nil
}

// row is s as a listing shows it; call with f.mu held.
func (s *sbx) row() sandbox.Sandbox {
	return sandbox.Sandbox{ID: s.id, Key: s.key, Deadline: s.deadline, ClaimedAt: s.claimedAt,
		Hibernated: s.hibernated, FromCheckpoint: s.fromCheckpoint, ClaimRef: s.claimRef}
}

func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	c, ok := f.node(w, r)
	if !ok {
		return
	}
	ref := r.URL.Query().Get("claim_ref")
	out := sandbox.SandboxList{Sandboxes: []sandbox.Sandbox{}}
	f.mu.Lock()
	for _, s := range f.sandboxes {
		if c.visible(s.tenant) && (ref == "" || s.claimRef == ref) {
			out.Sandboxes = append(out.Sandboxes, s.row())
		}
	}
	f.mu.Unlock()
	slices.SortFunc(out.Sandboxes, func(a, b sandbox.Sandbox) int { return a.ClaimedAt.Compare(b.ClaimedAt) })
	writeJSON(w, http.StatusOK, out)
}

func (f *Fake) get(w http.ResponseWriter, r *http.Request) {
	if !f.rootOnly(w, r) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sandboxes[r.PathValue("id")]
	if s == nil {
		writeError(w, http.StatusNotFound, "sandbox not found")
		return
	}
	row := s.row()
	if f.opts.RootToken != "" { // a node without an api_token never grants per-sandbox authority
		row.Token = s.token
	}
	writeJSON(w, http.StatusOK, row)
}

func (f *Fake) release(w http.ResponseWriter, r *http.Request) {
	s, ok := f.owned(w, r, true)
	if !ok {
		return
	}
	f.mu.Lock()
	gone := f.sandboxes[s.id] != s
	delete(f.sandboxes, s.id)
	f.mu.Unlock()
	if gone {
		writeError(w, http.StatusNotFound, "sandbox not found")
		return
	}
	f.destroy(s)
	w.WriteHeader(http.StatusNoContent)
}

func (f *Fake) hibernate(w http.ResponseWriter, r *http.Request) {
	s, ok := f.owned(w, r, true)
	if !ok {
		return
	}
	if s.key.Net == sandbox.NetEgress {
		writeError(w, http.StatusConflict, "a sandbox on the egress lane cannot hibernate")
		return
	}
	s.box.stop()
	f.mu.Lock()
	s.hibernated = true
	f.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// awaken brings s back if hibernated: the explicit wake and every data-plane access.
func (f *Fake) awaken(s *sbx) error {
	if err := s.box.start(); err != nil {
		return err
	}
	f.mu.Lock()
	s.hibernated = false
	f.mu.Unlock()
	return nil
}

func (f *Fake) wake(w http.ResponseWriter, r *http.Request) {
	s, ok := f.owned(w, r, true)
	if !ok {
		return
	}
	if err := f.awaken(s); err != nil {
		writeError(w, http.StatusInternalServerError, "wake failed: "+err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (f *Fake) renew(w http.ResponseWriter, r *http.Request) {
	s, ok := f.owned(w, r, true)
	if !ok {
		return
	}
	var req sandbox.RenewRequest
	if !decode(w, r, &req, false, true) {
		return
	}
	ttl, msg := lease(req.TTLSeconds)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	f.mu.Lock()
	s.deadline = time.Now().UTC().Add(ttl)
	d := s.deadline
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, sandbox.RenewResponse{Deadline: d})
}

func (f *Fake) exec(w http.ResponseWriter, r *http.Request) {
	s, ok := f.owned(w, r, false)
	if !ok {
		return
	}
	var req sandbox.ExecRequest
	if !decode(w, r, &req, true, false) {
		return
	}
	switch {
	case len(req.Argv) == 0 || req.Argv[0] == "":
		writeError(w, http.StatusBadRequest, "argv is empty")
		return
	case req.TimeoutSeconds < 0:
		writeError(w, http.StatusBadRequest, "timeout_seconds must not be negative")
		return
	}
	if err := f.awaken(s); err != nil {
		writeError(w, http.StatusBadGateway, "guest unreachable: "+err.Error())
		return
	}
	res, err := s.box.run(r.Context(), req)
	switch {
	case err != nil && r.Context().Err() != nil:
		return // the client hung up; the child is dead
	case err != nil:
		writeError(w, http.StatusBadGateway, err.Error())
	case res.tooLarge:
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("output exceeds %d bytes", sandbox.MaxExecOutput))
	case res.timedOut:
		writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("command timed out after %ds", req.TimeoutSeconds))
	case res.badInput != "":
		writeError(w, http.StatusBadRequest, res.badInput)
	default:
		writeJSON(w, http.StatusOK, res.res)
	}
}

func (f *Fake) stats(w http.ResponseWriter, r *http.Request) {
	if !f.rootOnly(w, r) {
		return
	}
	f.mu.Lock()
	s := f.sandboxes[r.PathValue("id")]
	var st sandbox.Stats
	if s != nil {
		st = sandbox.Stats{ID: s.id, CPUCount: sizes[s.key.Size].cpus, MemTotalBytes: sizes[s.key.Size].mem,
			Hibernated: s.hibernated, MeasuredAt: time.Now().UTC()}
	}
	f.mu.Unlock()
	if s == nil {
		writeError(w, http.StatusNotFound, "sandbox not found")
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (f *Fake) setPools(w http.ResponseWriter, r *http.Request) {
	if !f.rootOnly(w, r) {
		return
	}
	var req sandbox.PoolsRequest
	if !decode(w, r, &req, false, false) {
		return
	}
	seen := map[sandbox.PoolKey]bool{}
	for i, p := range req.Pools {
		key, msg := f.poolKey(p.Template, p.Net, p.Size)
		switch {
		case msg != "":
		case p.Warm < 0:
			msg = "warm must not be negative"
		case p.WarmMax != 0 && p.WarmMax < p.Warm:
			msg = "warm_max is below warm"
		case p.IdleHibernateSeconds < 0:
			msg = "idle_hibernate_seconds must not be negative"
		case seen[key]:
			msg = "duplicate pool"
		}
		if msg != "" {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("pools[%d]: %s", i, msg))
			return
		}
		seen[key] = true
		req.Pools[i].Net, req.Pools[i].Size = key.Net, key.Size
	}
	f.mu.Lock()
	f.pools = req.Pools
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, f.infoBody())
}

func (f *Fake) info(w http.ResponseWriter, r *http.Request) {
	if !f.rootOnly(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, f.infoBody())
}

// infoBody reports the fake honestly: pools are notional (a claim always starts a box at once),
// and hibernate keeps only the disk.
func (f *Fake) infoBody() sandbox.Info {
	isolation := "none (host processes)"
	if f.isolated {
		isolation = "namespaces (mount, pid)"
	}
	info := sandbox.Info{Pools: []sandbox.PoolInfo{}, Runtime: "sandboxtest", Capabilities: &sandbox.Capabilities{
		Lanes: []string{sandbox.NetNone, sandbox.NetEgress}, Isolation: isolation,
	}}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.pools {
		info.Pools = append(info.Pools, sandbox.PoolInfo{Key: sandbox.PoolKey{Template: p.Template, Net: p.Net, Size: p.Size},
			Warm: p.Warm, Target: p.Warm, Golden: true})
	}
	for _, s := range f.sandboxes {
		info.Claimed++
		if s.hibernated {
			info.Hibernated++
		}
	}
	return info
}

func (f *Fake) metrics(w http.ResponseWriter, r *http.Request) {
	if !f.rootOnly(w, r) {
		return
	}
	info := f.infoBody()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	var b strings.Builder
	fmt.Fprintf(&b, "sandboxd_claimed %d\nsandboxd_hibernated %d\n", info.Claimed, info.Hibernated)
	_, _ = w.Write([]byte(b.String()))
}
