package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// ErrUnknownTemplate is what Options.Images returns, wrapped, for a template it does not have.
// It wraps fs.ErrNotExist, so an Images that simply fails to find an image directory is
// understood the same way: the claim answers 400 naming the template.
var ErrUnknownTemplate = fmt.Errorf("unknown template: %w", fs.ErrNotExist)

// IsolationHeader is the header of GET /healthz that states what isolates this engine's boxes
// (the runtime's Capabilities().Isolation); the body stays the contract's "ok".
const IsolationHeader = "Cocoonbox-Isolation"

// Options configures an Engine.
type Options struct {
	// Dir holds the engine's records, box directories, checkpoints and usage journal. Required.
	Dir string
	// Runtime runs the boxes. Required.
	Runtime runtime.Runtime
	// Images resolves a template name to its read-only rootfs directory; for an unknown name
	// it returns an error wrapping ErrUnknownTemplate or fs.ErrNotExist. Required.
	Images func(template string) (rootfs string, err error)
	// RootToken is the operator credential (upstream's api_token). Empty with no tenant tokens
	// leaves node-level endpoints open; sandbox tokens still guard sandbox verbs.
	RootToken string
	// TenantTokens may claim, checkpoint and list their own sandboxes and checkpoints. Each is
	// a user of the engine, beside the root token's holder; a runtime that is not Sandboxed
	// serves one user, so New refuses tenant tokens over it.
	TenantTokens []string
	// Now is the clock for leases, idle hibernation and timestamps; time.Now when nil.
	Now func() time.Time
	// Logger receives the engine's log; discarded when nil.
	Logger *slog.Logger
	// OwnerAddr is this engine's address as clients reach it, returned as a claim's owner_addr.
	OwnerAddr string
	// MaxSandboxes caps the boxes (claimed and warm) this engine runs; 0 means
	// DefaultMaxSandboxes of the host's memory. Beyond it a claim answers 429 with Retry-After,
	// naming the limit, and pools stop refilling.
	MaxSandboxes int
	// MemoryOvercommit is how many times the memory left for boxes (the host's, less 1 GiB
	// kept for the host) their sizes' memory may add up to; 0 means 1, no overcommit. Every box
	// counts, warm, claimed or hibernated (a hibernated box must find its memory when it wakes).
	// An idle box uses a fraction of its size, so a host of idle desktops may take more (see the
	// density figures in docs/benchmarks.md). Beyond it a claim answers 429 naming the setting,
	// and pools stop refilling.
	MemoryOvercommit float64
	// HostMemoryBytes is the host's memory; 0 reads it from /proc/meminfo.
	HostMemoryBytes int64
	// BoxDiskMB is the disk quota of every box this engine starts from now on; 0 means each
	// size's own (cocoonbox.SizeSpec.DiskMB). A box keeps the disk it was made with.
	BoxDiskMB int
	// TickInterval is how often Run reaps expired leases, idle-hibernates and checks the pools;
	// one second when zero.
	TickInterval time.Duration
	// NoDiskExport turns the disk export and import endpoints off, as upstream sandboxd has
	// none, so that cocoonbox's other snapshot path (the in-box agent's State service) can be
	// run against this engine.
	NoDiskExport bool
}

// Engine serves the sandboxd API over a runtime. Create it with New, serve Handler, run Run for
// the background loops, and Close it when done; the boxes keep running across Close and are
// re-adopted by the next New on the same Dir.
type Engine struct {
	dir       string
	rt        runtime.Runtime
	images    func(string) (string, error)
	rootToken string
	tenants   []tenant
	now       func() time.Time
	log       *slog.Logger
	ownerAddr string
	maxBoxes  int
	memory    memoryBudget
	diskMB    int
	tick      time.Duration
	noExport  bool

	journal *journal
	metrics *metrics
	unlock  func()
	fillCh  chan struct{} // wakes the pool filler
	poolsMu sync.Mutex    // serializes PUT /v1/pools, so two updates cannot interleave pools.json writes

	mu          sync.Mutex // guards the maps below; never held across a runtime call
	boxes       map[string]*box
	checkpoints map[string]*checkpoint
	pools       map[sandbox.PoolKey]*pool
	doomed      map[string]*box // released boxes whose destroy failed, retried by the reaper
	closed      bool
}

// New opens the engine's directory, takes its lock and re-adopts every box a previous engine
// left there (see adopt).
func New(opts Options) (*Engine, error) {
	if opts.Dir == "" || opts.Runtime == nil || opts.Images == nil {
		return nil, errors.New("new engine: Dir, Runtime and Images are required")
	}
	tenants, err := tenantsOf(opts.RootToken, opts.TenantTokens)
	if err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	if !opts.Runtime.Capabilities().Sandboxed && len(tenants) > 0 {
		return nil, fmt.Errorf("new engine: runtime %s has no sandbox (isolation %s) and serves one user; "+
			"it takes no tenant tokens (use gvisor for more than one user)", opts.Runtime.Name(), opts.Runtime.Capabilities().Isolation)
	}
	if opts.MaxSandboxes < 0 {
		return nil, fmt.Errorf("new engine: max sandboxes must not be negative, got %d", opts.MaxSandboxes)
	}
	if opts.BoxDiskMB < 0 {
		return nil, fmt.Errorf("new engine: box disk must not be negative, got %d MiB", opts.BoxDiskMB)
	}
	if opts.MemoryOvercommit < 0 {
		return nil, fmt.Errorf("new engine: memory overcommit must not be negative, got %g", opts.MemoryOvercommit)
	}
	if opts.HostMemoryBytes == 0 {
		mem, err := HostMemory()
		if err != nil {
			return nil, fmt.Errorf("new engine: %w", err)
		}
		opts.HostMemoryBytes = mem
	}
	if opts.MaxSandboxes == 0 {
		opts.MaxSandboxes = DefaultMaxSandboxes(opts.HostMemoryBytes)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	e := &Engine{
		dir: dir, rt: opts.Runtime, images: opts.Images, rootToken: opts.RootToken, tenants: tenants,
		now: opts.Now, log: opts.Logger, ownerAddr: opts.OwnerAddr, maxBoxes: opts.MaxSandboxes,
		memory: newMemoryBudget(opts.HostMemoryBytes, opts.MemoryOvercommit),
		diskMB: opts.BoxDiskMB, tick: opts.TickInterval, noExport: opts.NoDiskExport, fillCh: make(chan struct{}, 1), metrics: newMetrics(),
		boxes: map[string]*box{}, pools: map[sandbox.PoolKey]*pool{}, doomed: map[string]*box{},
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.tick <= 0 {
		e.tick = time.Second
	}
	// Records hold tokens and stay owner-only. The other directories may be traversed (not
	// listed) by others, so a runtime that runs a box as a mapped, unprivileged user can still
	// reach the box's directory and its image through them.
	for _, d := range []struct {
		name string
		perm os.FileMode
	}{{"", 0o711}, {recordsDir, 0o700}, {boxesDir, 0o711}, {checkpointsDir, 0o700}} {
		if err := os.MkdirAll(filepath.Join(dir, d.name), d.perm); err != nil {
			return nil, fmt.Errorf("new engine: %w", err)
		}
	}
	if e.unlock, err = lockDir(filepath.Join(dir, lockFile)); err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			e.unlock()
		}
	}()
	if err := e.checkRuntime(); err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	if e.journal, err = openJournal(filepath.Join(dir, journalFile), e.now); err != nil {
		return nil, fmt.Errorf("new engine: %w", err)
	}
	if err := e.loadPools(); err != nil {
		_ = e.journal.close()
		return nil, fmt.Errorf("new engine: %w", err)
	}
	if e.checkpoints, err = e.loadCheckpoints(); err != nil {
		_ = e.journal.close()
		return nil, fmt.Errorf("new engine: %w", err)
	}
	// Adoption asks the runtime about every box; bound it so a wedged runtime fails the start
	// instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := e.adopt(ctx); err != nil {
		_ = e.journal.close()
		return nil, fmt.Errorf("new engine: %w", err)
	}
	ok = true
	return e, nil
}

// Handler routes the sandboxd API.
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/claim", e.node(e.handleClaim))
	mux.Handle("GET /v1/sandboxes", e.node(e.handleList))
	mux.Handle("GET /v1/sandboxes/{id}", e.operator(e.handleGet))
	mux.Handle("GET /v1/sandboxes/{id}/stats", e.operator(e.handleStats))
	mux.Handle("POST /v1/sandboxes/{id}/release", e.plain(e.handleRelease))
	mux.Handle("POST /v1/sandboxes/{id}/hibernate", e.plain(e.handleHibernate))
	mux.Handle("POST /v1/sandboxes/{id}/wake", e.plain(e.handleWake))
	mux.Handle("POST /v1/sandboxes/{id}/renew", e.plain(e.handleRenew))
	mux.Handle("PUT /v1/sandboxes/{id}/egress", e.plain(e.handleSetEgress))
	mux.Handle("POST /v1/sandboxes/{id}/exec", e.plain(e.handleExec))
	mux.Handle("GET /v1/sandboxes/{id}/ports/{port}", e.plain(e.handleRelay))
	mux.Handle("GET /v1/sandboxes/{id}/agent", e.plain(e.handleAgent))
	mux.Handle("POST /v1/sandboxes/{id}/checkpoint", e.node(e.handleCheckpoint))
	mux.Handle("POST /v1/checkpoints/{id}/claim", e.node(e.handleClaimCheckpoint))
	mux.Handle("GET /v1/checkpoints", e.node(e.handleListCheckpoints))
	if !e.noExport {
		mux.Handle("GET /v1/checkpoints/{id}/disk", e.node(e.handleExportCheckpoint))
		mux.Handle("POST /v1/checkpoints/{id}/disk", e.node(e.handleExportCheckpoint))
		mux.Handle("GET /v1/checkpoints/{id}/disk/index", e.node(e.handleCheckpointIndex))
		mux.Handle("POST /v1/sandboxes/{id}/checkpoint/since", e.node(e.handleCheckpointSince))
		mux.Handle("POST /v1/checkpoints/import", e.node(e.handleImportCheckpoint))
		mux.Handle("POST /v1/sandboxes/import", e.node(e.handleImportClaim))
	}
	mux.Handle("DELETE /v1/checkpoints/{id}", e.node(e.handleDeleteCheckpoint))
	mux.Handle("PUT /v1/pools", e.operator(e.handlePutPools))
	mux.Handle("GET /v1/info", e.operator(e.handleInfo))
	mux.Handle("GET /metrics", e.operator(e.handleMetrics))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set(IsolationHeader, e.rt.Capabilities().Isolation)
		_, _ = w.Write([]byte("ok"))
	})
	// Everything else, including a known path with the wrong method, answers in the contract's
	// error shape rather than the mux's plain text.
	mux.Handle("/", e.plain(func(http.ResponseWriter, *http.Request) error {
		return newError(kindNotFound, "no such endpoint")
	}))
	return e.metrics.instrument(mux)
}

// Run runs the background loops — the lease reaper with idle hibernation, and the pool
// filler — until ctx ends.
func (e *Engine) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { e.reapLoop(ctx) })
	wg.Go(func() { e.fillLoop(ctx) })
	wg.Wait()
	return nil
}

// Close ends open relays and running commands and releases the directory lock. Boxes keep
// running; the next New on the same Dir re-adopts them.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	boxes := make([]*box, 0, len(e.boxes))
	for _, b := range e.boxes {
		boxes = append(boxes, b)
	}
	e.mu.Unlock()
	for _, b := range boxes {
		b.cancelHolds()
	}
	err := e.journal.close()
	e.unlock()
	return err
}

// lookup returns the claimed, live sandbox named id, or nil. A sandbox past its deadline is
// already gone to callers, whether or not the reaper has destroyed it yet.
func (e *Engine) lookup(id string) *box {
	e.mu.Lock()
	b := e.boxes[id]
	e.mu.Unlock()
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gone || b.rec.Warm || b.rec.Pending || !e.now().Before(b.rec.Deadline) {
		return nil
	}
	return b
}

// handlerFunc is a handler that returns its error for writeError to answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// plain adapts a handler that does its own (sandbox-token) authorization.
func (e *Engine) plain(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			e.writeError(w, r, err)
		}
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b)
}

func newSandboxID() string    { return "sb_" + randomHex(8) }
func newCheckpointID() string { return "ck_" + randomHex(8) }
func newSandboxToken() string { return randomHex(16) }

func validSandboxID(id string) bool {
	return len(id) == 3+16 && id[:3] == "sb_" && isLowerHex(id[3:])
}

func validCheckpointID(id string) bool {
	return len(id) == 3+16 && id[:3] == "ck_" && isLowerHex(id[3:])
}

func isLowerHex(s string) bool {
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// lifecycleCtx detaches a runtime call that changes a box's state from the client's request:
// a client that disconnects mid-hibernate must not leave a box half-checkpointed.
func lifecycleCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
}
