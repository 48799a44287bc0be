// Package agentvmtest is a behavioural fake of the agent resident in every box (agentvm): a gRPC
// server of its Agents, Desktop and Info services behind the same credential check, reached
// in memory. It keeps real state rather than canned answers (a journal of completed steps
// answering retries, the steps in progress that Cancel stops, the desktop's control lease by
// sequence, the desktop input it was sent) and takes fault knobs (fail a method's next calls
// with a gRPC status, delay calls, change the version), so the control plane's callers of the
// agent can be tested without a box. Tests only: no agent binary contains it, and image/build.sh
// leaves it out of the agent's source hash.
//
// It imports what agentvm may (its proto and the standard library), so it can be used from any
// test; internal/boxlink/boxlinktest puts it behind a fake sandbox, the way production code
// reaches an agent.
package agentvmtest

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/loomhand/cocoonbox/agentvm"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// Methods the fault knobs and Calls take: the generated full method names.
const (
	MethodStep            = agentvmv1.Agents_Step_FullMethodName
	MethodCancel          = agentvmv1.Agents_Cancel_FullMethodName
	MethodSetDesktopLease = agentvmv1.Agents_SetDesktopLease_FullMethodName
	MethodInfo            = agentvmv1.Info_Get_FullMethodName
	MethodScreenshot      = agentvmv1.Desktop_Screenshot_FullMethodName
	MethodClick           = agentvmv1.Desktop_Click_FullMethodName
	MethodMove            = agentvmv1.Desktop_Move_FullMethodName
	MethodType            = agentvmv1.Desktop_Type_FullMethodName
	MethodKey             = agentvmv1.Desktop_Key_FullMethodName
	MethodScroll          = agentvmv1.Desktop_Scroll_FullMethodName
)

// StepFunc runs one step that the journal has not recorded. ctx is cancelled by Cancel of the
// step's run. A nil StepFunc answers every step done, with the task (or message) as its text.
type StepFunc func(ctx context.Context, req *agentvmv1.StepRequest) (*agentvmv1.StepResponse, error)

// Options configure an Agent.
type Options struct {
	// Credential is the per-box credential every call must carry as "authorization: Bearer ...";
	// empty means none yet: every call is UNAUTHENTICATED "no credential yet" until
	// SetCredential, as the real agent before the control plane writes its credential file.
	Credential string
	// Version is what Info returns; empty means agentvm.Version, the agent this tree builds.
	Version string
	// Step runs the steps (see StepFunc).
	Step StepFunc
	// ScreenWidth and ScreenHeight are the screen's size; 0 means 1280x800.
	ScreenWidth, ScreenHeight int
	// NoDesktop leaves the Desktop service unregistered (UNIMPLEMENTED), as a box without one.
	NoDesktop bool
}

// Agent is a running fake agent.
type Agent struct {
	opts Options
	lis  *bufconn.Listener
	srv  *grpc.Server

	mu       sync.Mutex
	cred     [sha256.Size]byte
	hasCred  bool
	version  string
	calls    map[string]int
	faults   map[string][]error
	delays   map[string]time.Duration
	steps    []*agentvmv1.StepRequest
	journal  map[stepKey]*agentvmv1.StepResponse
	inflight map[stepKey]chan struct{} // closed when the step's first attempt ends
	running  map[stepKey]context.CancelFunc
	cancels  []string
	lease    Lease
	inputs   []Input
}

type stepKey struct {
	run  string
	step int32
}

// New starts an agent for the test; it stops when the test ends.
func New(t testing.TB, opts Options) *Agent {
	t.Helper()
	if opts.ScreenWidth <= 0 || opts.ScreenHeight <= 0 {
		opts.ScreenWidth, opts.ScreenHeight = 1280, 800
	}
	a := &Agent{
		opts: opts, lis: bufconn.Listen(1 << 20), version: opts.Version,
		calls: map[string]int{}, faults: map[string][]error{}, delays: map[string]time.Duration{},
		journal: map[stepKey]*agentvmv1.StepResponse{}, inflight: map[stepKey]chan struct{}{},
		running: map[stepKey]context.CancelFunc{},
	}
	if a.version == "" {
		a.version = agentvm.Version
	}
	a.SetCredential(opts.Credential)
	a.srv = grpc.NewServer(grpc.ChainUnaryInterceptor(a.intercept))
	agentvmv1.RegisterAgentsServer(a.srv, agents{a: a})
	agentvmv1.RegisterInfoServer(a.srv, info{a: a})
	if !opts.NoDesktop {
		agentvmv1.RegisterDesktopServer(a.srv, desktop{a: a})
	}
	go func() { _ = a.srv.Serve(a.lis) }()
	t.Cleanup(a.srv.Stop)
	return a
}

// Dial opens a connection to the agent, as the engine's ports relay does to wire.AgentPort.
func (a *Agent) Dial(ctx context.Context) (net.Conn, error) { return a.lis.DialContext(ctx) }

// SetCredential replaces the credential calls must carry (empty: none yet).
func (a *Agent) SetCredential(cred string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cred, a.hasCred = sha256.Sum256([]byte(cred)), cred != ""
}

// SetVersion changes what Info returns.
func (a *Agent) SetVersion(v string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.version = v
}

// FailNext makes the next n calls of method (a Method constant) fail with code and msg, after
// the credential check, before the call has any effect.
func (a *Agent) FailNext(method string, n int, code codes.Code, msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for range n {
		a.faults[method] = append(a.faults[method], status.Error(code, msg))
	}
}

// Delay makes every later call of method wait d (or until its caller gives up) before anything
// else; 0 removes the delay.
func (a *Agent) Delay(method string, d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.delays[method] = d
}

// Calls counts the calls of method that passed the credential check, failed ones included.
func (a *Agent) Calls(method string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[method]
}

// intercept delays, checks the credential as agentvm's server does (a missing, malformed or
// wrong bearer is UNAUTHENTICATED, naming the reason, never the credential), counts the call and
// fails it when a fault is queued.
func (a *Agent) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	a.mu.Lock()
	d := a.delays[info.FullMethod]
	a.mu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.calls[info.FullMethod]++
	var fault error
	if q := a.faults[info.FullMethod]; len(q) > 0 {
		fault, a.faults[info.FullMethod] = q[0], q[1:]
	}
	a.mu.Unlock()
	if fault != nil {
		return nil, fault
	}
	return handler(ctx, req)
}

func (a *Agent) authorize(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	var token string
	if len(vals) == 1 {
		if t, ok := strings.CutPrefix(vals[0], "Bearer "); ok {
			token = t
		}
	}
	a.mu.Lock()
	want, ok := a.cred, a.hasCred
	a.mu.Unlock()
	if !ok {
		return status.Error(codes.Unauthenticated, "no credential yet")
	}
	sum := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
		return status.Error(codes.Unauthenticated, "invalid credential")
	}
	return nil
}

// info is the Info service.
type info struct {
	agentvmv1.UnimplementedInfoServer
	a *Agent
}

// Get returns the version and the capabilities of an agent with (or without) a desktop.
func (s info) Get(context.Context, *agentvmv1.GetInfoRequest) (*agentvmv1.InfoResponse, error) {
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	resp := &agentvmv1.InfoResponse{Version: s.a.version, Capabilities: []string{"step", "exec", "state"}}
	if !s.a.opts.NoDesktop {
		resp.Capabilities = append(resp.Capabilities, "desktop")
		resp.WindowManager = "Xfwm4"
	}
	return resp, nil
}
