package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// maxWarm bounds one pool's target: warm boxes cost memory whether or not anyone claims them.
const maxWarm = 64

// pool is one warm pool: boxes of one (template, net, size) started ahead of claims.
type pool struct {
	key       sandbox.PoolKey
	spec      sandbox.PoolSpec
	ready     []*box // started, unclaimed, oldest first
	refilling int    // starts in flight
	failures  int    // consecutive start failures, for the backoff
	retryAt   time.Time
}

// handlePutPools replaces the warm-pool targets; pools left out are drained. It answers the
// /v1/info body.
func (e *Engine) handlePutPools(w http.ResponseWriter, r *http.Request, c caller) error {
	var req sandbox.PoolsRequest
	if err := decode(w, r, &req, bodyStrict); err != nil {
		return err
	}
	specs := map[sandbox.PoolKey]sandbox.PoolSpec{}
	for i, p := range req.Pools {
		key, err := e.parseKey(p.Template, p.Net, p.Size)
		if err == nil {
			err = checkPoolSpec(p)
		}
		if err == nil && specs[key] != (sandbox.PoolSpec{}) {
			err = invalid("repeats the pool (%s, %s, %s)", key.Template, key.Net, key.Size)
		}
		if err == nil {
			_, err = e.rootfs(key.Template)
		}
		if err != nil {
			var ae *apiError
			if errors.As(err, &ae) {
				return &apiError{kind: ae.kind, msg: fmt.Sprintf("pools[%d]: %s", i, ae.msg)}
			}
			return err
		}
		p.Template, p.Net, p.Size = key.Template, key.Net, key.Size
		specs[key] = p
	}
	e.poolsMu.Lock()
	excess := e.setPools(specs)
	err := e.savePools()
	e.poolsMu.Unlock()
	for _, b := range excess {
		e.discard(r.Context(), b)
	}
	if err != nil {
		return err
	}
	e.kickFill()
	return e.handleInfo(w, r, c)
}

func checkPoolSpec(p sandbox.PoolSpec) error {
	switch {
	case p.Warm < 0 || p.Warm > maxWarm:
		return invalid("warm: must be 0 to %d, got %d", maxWarm, p.Warm)
	case p.WarmMax != 0 && p.WarmMax < p.Warm:
		return invalid("warm_max: must be at least warm (%d), got %d", p.Warm, p.WarmMax)
	case p.IdleHibernateSeconds < 0:
		return invalid("idle_hibernate_seconds: must not be negative, got %d", p.IdleHibernateSeconds)
	}
	return nil
}

// setPools installs the new targets and returns the warm boxes no pool wants any more.
func (e *Engine) setPools(specs map[sandbox.PoolKey]sandbox.PoolSpec) (excess []*box) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for key, p := range e.pools {
		if _, ok := specs[key]; !ok {
			excess = append(excess, p.ready...)
			delete(e.pools, key)
		}
	}
	for key, s := range specs {
		p := e.pools[key]
		if p == nil {
			p = &pool{key: key}
			e.pools[key] = p
		}
		p.spec, p.failures, p.retryAt = s, 0, time.Time{}
		if n := len(p.ready); n > s.Warm {
			excess = append(excess, p.ready[s.Warm:]...)
			p.ready = p.ready[:s.Warm:s.Warm]
		}
	}
	return excess
}

// savePools writes the targets; the caller holds poolsMu.
func (e *Engine) savePools() error {
	e.mu.Lock()
	specs := make([]sandbox.PoolSpec, 0, len(e.pools))
	for _, p := range e.pools {
		specs = append(specs, p.spec)
	}
	e.mu.Unlock()
	slices.SortFunc(specs, func(a, b sandbox.PoolSpec) int {
		return cmp.Or(cmp.Compare(a.Template, b.Template), cmp.Compare(a.Net, b.Net), cmp.Compare(a.Size, b.Size))
	})
	return writeJSONFile(filepath.Join(e.dir, poolsFile), sandbox.PoolsRequest{Pools: specs})
}

// loadPools reads the targets a previous engine was given.
func (e *Engine) loadPools() error {
	data, err := os.ReadFile(filepath.Join(e.dir, poolsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var req sandbox.PoolsRequest
	if err == nil {
		err = json.Unmarshal(data, &req)
	}
	if err != nil {
		return fmt.Errorf("read pools: %w", err)
	}
	for _, s := range req.Pools {
		key, err := e.parseKey(s.Template, s.Net, s.Size)
		if err == nil {
			err = checkPoolSpec(s)
		}
		if err != nil {
			e.log.Error("skipping a stored pool", "template", s.Template, "err", err)
			continue
		}
		e.pools[key] = &pool{key: key, spec: s}
	}
	return nil
}

// popWarm takes the oldest ready box of key's pool, or nil.
func (e *Engine) popWarm(key sandbox.PoolKey) *box {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.pools[key]
	if p == nil || len(p.ready) == 0 {
		return nil
	}
	b := p.ready[0]
	p.ready = p.ready[1:]
	return b
}

// idleFor is how long a box of key may sit idle before it is hibernated; 0 is never.
func (e *Engine) idleFor(key sandbox.PoolKey) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.pools[key]; p != nil {
		return p.spec.IdleHibernateSeconds
	}
	return 0
}

// kickFill wakes the filler without waiting for its tick.
func (e *Engine) kickFill() {
	select {
	case e.fillCh <- struct{}{}:
	default:
	}
}

// fillLoop keeps the pools at their targets until ctx ends. It starts one box at a time: a
// burst of parallel boots would starve the claims being served on a small machine.
func (e *Engine) fillLoop(ctx context.Context) {
	t := time.NewTicker(e.tick)
	defer t.Stop()
	for {
		for ctx.Err() == nil {
			p, b := e.nextFill()
			if b == nil {
				break
			}
			e.fillOne(ctx, p, b)
		}
		select {
		case <-ctx.Done():
			return
		case <-e.fillCh:
		case <-t.C:
		}
	}
}

// nextFill picks a pool below its target and reserves a box for it, or returns nil.
func (e *Engine) nextFill() (*pool, *box) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || len(e.boxes) >= e.maxBoxes {
		return nil, nil
	}
	keys := make([]sandbox.PoolKey, 0, len(e.pools))
	for k := range e.pools {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b sandbox.PoolKey) int {
		return cmp.Or(cmp.Compare(a.Template, b.Template), cmp.Compare(a.Net, b.Net), cmp.Compare(a.Size, b.Size))
	})
	now := time.Now() // backoff is operational time, not the leases' injected clock
	for _, k := range keys {
		p := e.pools[k]
		if len(p.ready)+p.refilling >= p.spec.Warm || now.Before(p.retryAt) || e.admitLocked(k) != nil {
			continue
		}
		p.refilling++
		return p, e.newBoxLocked(k)
	}
	return nil, nil
}

// fillOne starts a reserved warm box and adds it to its pool, if the pool still wants it.
func (e *Engine) fillOne(ctx context.Context, p *pool, b *box) {
	err := e.save(b)
	var rootfs string
	if err == nil {
		rootfs, err = e.rootfs(p.key.Template)
	}
	if err != nil {
		e.discard(ctx, b)
	} else {
		err = e.start(ctx, b, rootfs) // discards b itself on failure
	}
	e.mu.Lock()
	p.refilling--
	if err != nil {
		p.failures++
		p.retryAt = time.Now().Add(min(time.Second<<min(p.failures, 6), time.Minute))
		e.mu.Unlock()
		e.log.Warn("warm pool start failed", "template", p.key.Template, "size", p.key.Size, "failures", p.failures, "err", err)
		return
	}
	p.failures = 0
	wanted := e.pools[p.key] == p && len(p.ready) < p.spec.Warm
	if wanted {
		b.mu.Lock()
		b.rec.Warm, b.rec.Pending = true, false
		b.mu.Unlock()
		p.ready = append(p.ready, b)
	}
	e.mu.Unlock()
	if !wanted {
		e.discard(ctx, b)
		return
	}
	if err := e.save(b); err != nil {
		e.log.Error("save warm record", "id", b.rec.ID, "err", err)
	}
	e.keepReady(b.rec.ID, true)
}

// keepReady keeps a warm box's way in ready while it waits for its claim, where the runtime can
// (runtime.ReadyKeeper), so the claim's first exec pays no process start.
func (e *Engine) keepReady(id string, keep bool) {
	if k, ok := e.rt.(runtime.ReadyKeeper); ok {
		k.KeepReady(id, keep)
	}
}
