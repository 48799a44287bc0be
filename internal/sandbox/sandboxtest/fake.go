// Package sandboxtest is a behavioural fake of a sandbox engine: an HTTP server that speaks the
// sandboxd API (shared/SANDBOXD.md) with the wire types of package sandbox, keeps real state
// (sandboxes, tokens, leases, checkpoints, pools) and runs exec as real host processes inside a
// per-sandbox box (box.go). It exists so that the client, the conformance suite and the activities
// can be tested now, fast, without the local engine or upstream sandboxd, and so that failures an
// engine rarely shows can be provoked on demand: Fault knobs drop an answer after the effect
// happened (a lost claim response), answer a status with Retry-After, delay a call, redirect a
// claim, and Lose makes a sandbox vanish as on node loss.
//
// Memory is not preserved across hibernate (Info says so): hibernate stops the box's processes
// and keeps its disk, like the local engine's process runtime.
package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// Verbs name the endpoints for Fault and Calls.
const (
	VerbClaim            = "claim"
	VerbList             = "list"
	VerbGet              = "get"
	VerbRelease          = "release"
	VerbHibernate        = "hibernate"
	VerbWake             = "wake"
	VerbRenew            = "renew"
	VerbExec             = "exec"
	VerbPorts            = "ports"
	VerbCheckpoint       = "checkpoint"
	VerbCheckpointClaim  = "checkpoint-claim"
	VerbCheckpoints      = "checkpoints"
	VerbDeleteCheckpoint = "delete-checkpoint"
	VerbStats            = "stats"
	VerbPools            = "pools"
	VerbInfo             = "info"
)

// Options configure a Fake.
type Options struct {
	// RootToken is the node api_token. With no RootToken and no Tenants, node endpoints are open
	// (sandbox tokens still guard sandbox verbs) and GET never reveals tokens.
	RootToken string
	// Tenants maps tenant tokens to tenant names.
	Tenants map[string]string
	// Templates are the template names a claim may use; default {"base"}.
	Templates []string
	// Dir holds the boxes; default a t.TempDir().
	Dir string
}

// Fault is one injected misbehaviour, consumed by the next call of its verb.
type Fault struct {
	// Delay waits before anything else.
	Delay time.Duration
	// AfterEffect serves the call first (the sandbox is created, released…) and then fails as
	// below, so the client sees a failure of a call that took effect.
	AfterEffect bool
	// Drop closes the connection without an answer: a lost response.
	Drop bool
	// Status answers this status with {"error": Message} (and Retry-After when set).
	Status     int
	Message    string
	RetryAfter time.Duration
	// Redirect answers 200 {"redirect": Redirect} instead of serving (claims).
	Redirect []string
}

// Fake is a running fake engine.
type Fake struct {
	// URL is the engine's base URL, e.g. http://127.0.0.1:41234.
	URL string

	opts     Options
	dir      string
	isolated bool

	mu          sync.Mutex
	sandboxes   map[string]*sbx
	checkpoints map[string]*checkpoint
	pools       []sandbox.PoolSpec
	faults      map[string][]Fault
	calls       map[string]int
	lastClaim   sandbox.ClaimRequest

	addr      string
	srv       *http.Server
	stopReap  context.CancelFunc
	reapDone  chan struct{}
	closeOnce sync.Once
}

type sbx struct {
	id, token, tenant, claimRef, fromCheckpoint string
	key                                         sandbox.PoolKey
	claimedAt, deadline                         time.Time
	hibernated                                  bool
	box                                         *box
}

type checkpoint struct {
	rec sandbox.Checkpoint
	dir string
}

// New starts a fake engine on loopback; it stops, and every box with it, when t ends.
func New(t testing.TB, opts Options) *Fake {
	t.Helper()
	if len(opts.Templates) == 0 {
		opts.Templates = []string{"base"}
	}
	f := &Fake{
		opts:        opts,
		dir:         opts.Dir,
		sandboxes:   map[string]*sbx{},
		checkpoints: map[string]*checkpoint{},
		faults:      map[string][]Fault{},
		calls:       map[string]int{},
	}
	if f.dir == "" {
		f.dir = t.TempDir()
	}
	f.isolated = probeIsolation(f.dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sandboxtest: listen: %v", err)
	}
	f.addr = ln.Addr().String()
	f.URL = "http://" + f.addr
	f.serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	f.stopReap, f.reapDone = cancel, make(chan struct{})
	go f.reap(ctx)
	t.Cleanup(f.Close)
	return f
}

// probeIsolation starts and stops one box to learn whether namespaces can be made here.
func probeIsolation(dir string) bool {
	if !namespacesAvailable {
		return false
	}
	b, err := newBox(filepath.Join(dir, "probe"), true)
	if err != nil {
		return false
	}
	defer os.RemoveAll(b.dir)
	if b.start() != nil {
		return false
	}
	b.stop()
	return true
}

// Isolated reports whether boxes run in their own namespaces, so that /root and /tmp inside a
// box are the box's own. Without it, commands run on the host and must not write there.
func (f *Fake) Isolated() bool { return f.isolated }

// Addr is the engine's host:port, as redirect targets and owner_addr name it.
func (f *Fake) Addr() string { return f.addr }

// Client returns a sandbox client of this engine presenting token.
func (f *Fake) Client(token string) *sandbox.HTTP {
	return sandbox.NewHTTP(f.URL, token, &http.Client{Timeout: 2 * time.Minute})
}

// FailNext makes the next call of verb misbehave as fault says; faults queue per verb.
func (f *Fake) FailNext(verb string, fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[verb] = append(f.faults[verb], fault)
}

// Calls returns how many requests for verb the fake has received.
func (f *Fake) Calls(verb string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[verb]
}

// LastClaim returns the body of the last claim the fake decoded (e.g. to see no_redirect).
func (f *Fake) LastClaim() sandbox.ClaimRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastClaim
}

// Lose makes a sandbox vanish without a release, as when its node dies.
func (f *Fake) Lose(id string) {
	f.mu.Lock()
	s := f.sandboxes[id]
	delete(f.sandboxes, id)
	f.mu.Unlock()
	if s != nil {
		f.destroy(s)
	}
}

// Sandboxes returns the IDs of the live sandboxes.
func (f *Fake) Sandboxes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.sandboxes))
	for id := range f.sandboxes {
		ids = append(ids, id)
	}
	return ids
}

// Restart stops serving and serves again on the same address with the same state, as an engine
// restarted after SIGKILL re-adopts its boxes: open connections break, boxes keep running.
func (f *Fake) Restart() error {
	_ = f.srv.Close()
	var ln net.Listener
	var err error
	for range 50 { // the old socket may linger a moment
		if ln, err = net.Listen("tcp", f.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("restart fake engine: %w", err)
	}
	f.serve(ln)
	return nil
}

// Close stops the engine and every box. It is called when the test ends.
func (f *Fake) Close() {
	f.closeOnce.Do(func() {
		_ = f.srv.Close()
		f.stopReap()
		<-f.reapDone
		f.mu.Lock()
		all := f.sandboxes
		f.sandboxes = map[string]*sbx{}
		f.mu.Unlock()
		for _, s := range all {
			f.destroy(s)
		}
	})
}

func (f *Fake) serve(ln net.Listener) {
	mux := http.NewServeMux()
	routes := []struct {
		pattern, verb string
		h             http.HandlerFunc
	}{
		{"POST /v1/claim", VerbClaim, f.claim},
		{"GET /v1/sandboxes", VerbList, f.list},
		{"GET /v1/sandboxes/{id}", VerbGet, f.get},
		{"POST /v1/sandboxes/{id}/release", VerbRelease, f.release},
		{"POST /v1/sandboxes/{id}/hibernate", VerbHibernate, f.hibernate},
		{"POST /v1/sandboxes/{id}/wake", VerbWake, f.wake},
		{"POST /v1/sandboxes/{id}/renew", VerbRenew, f.renew},
		{"POST /v1/sandboxes/{id}/exec", VerbExec, f.exec},
		{"GET /v1/sandboxes/{id}/ports/{port}", VerbPorts, f.ports},
		{"GET /v1/sandboxes/{id}/stats", VerbStats, f.stats},
		{"POST /v1/sandboxes/{id}/checkpoint", VerbCheckpoint, f.checkpoint},
		{"POST /v1/checkpoints/{id}/claim", VerbCheckpointClaim, f.claimCheckpoint},
		{"GET /v1/checkpoints", VerbCheckpoints, f.listCheckpoints},
		{"DELETE /v1/checkpoints/{id}", VerbDeleteCheckpoint, f.deleteCheckpoint},
		{"PUT /v1/pools", VerbPools, f.setPools},
		{"GET /v1/info", VerbInfo, f.info},
	}
	for _, r := range routes {
		mux.HandleFunc(r.pattern, f.route(r.verb, r.h))
	}
	mux.HandleFunc("GET /v1/sandboxes/{id}/agent", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotImplemented, "the agent relay is not served; use the ports relay")
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /metrics", f.metrics)
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
}

// route counts calls and applies a queued fault before (or after) serving.
func (f *Fake) route(verb string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls[verb]++
		fault, faulty := Fault{}, len(f.faults[verb]) > 0
		if faulty {
			fault = f.faults[verb][0]
			f.faults[verb] = f.faults[verb][1:]
		}
		f.mu.Unlock()
		if !faulty {
			h(w, r)
			return
		}
		if fault.Delay > 0 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(fault.Delay):
			}
		}
		switch {
		case fault.Redirect != nil:
			writeJSON(w, http.StatusOK, sandbox.ClaimResponse{Redirect: fault.Redirect})
			return
		case fault.AfterEffect:
			h(httptest.NewRecorder(), r)
		case fault.Status == 0 && !fault.Drop:
			h(w, r) // a delay only
			return
		}
		if fault.Drop {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
			return
		}
		if fault.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((fault.RetryAfter+time.Second-1)/time.Second)))
		}
		writeError(w, fault.Status, fault.Message)
	}
}

// reap destroys sandboxes whose lease ended, hibernated or not.
func (f *Fake) reap(ctx context.Context) {
	defer close(f.reapDone)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			var expired []*sbx
			f.mu.Lock()
			for id, s := range f.sandboxes {
				if !now.Before(s.deadline) {
					expired = append(expired, s)
					delete(f.sandboxes, id)
				}
			}
			f.mu.Unlock()
			for _, s := range expired {
				f.destroy(s)
			}
		}
	}
}

func (f *Fake) destroy(s *sbx) {
	s.box.stop()
	_ = os.RemoveAll(s.box.dir)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, sandbox.ErrorBody{Error: msg})
}

// decode reads a JSON body under the contract's rules: at most 1 MiB, malformed or oversized is
// 400 "invalid request body"; strict rejects unknown fields (exec); an empty body is allowed
// when emptyOK. It answers the error itself and reports whether to go on.
func decode(w http.ResponseWriter, r *http.Request, v any, strict, emptyOK bool) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, sandbox.MaxBodyBytes))
	if strict {
		dec.DisallowUnknownFields()
	}
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) && emptyOK {
		return true
	}
	if err == nil && dec.More() {
		err = errors.New("trailing data")
	}
	if err != nil {
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			writeError(w, http.StatusBadRequest, "unknown field "+field)
		} else {
			writeError(w, http.StatusBadRequest, sandbox.MsgInvalidBody)
		}
		return false
	}
	return true
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
