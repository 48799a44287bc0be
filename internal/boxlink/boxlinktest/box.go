// Package boxlinktest puts a fake agent (agentvm/agentvmtest) in a fake box: the part of
// sandbox.Client that boxlink uses to reach an agent (DialPort to wire.AgentPort, Exec to write
// its credential), checking the sandbox's ref and token as the engine does. It lives here, not in
// agentvmtest, because the agent's packages import nothing of the control plane.
package boxlinktest

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/loomhand/cocoonbox/agentvm/agentvmtest"
	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// Box is one sandbox whose agent is a fake. Calls it does not fake go to the embedded Client,
// the rest of the engine (nil: they panic): set it to a real client (sandboxtest's) for a box
// whose exec runs commands.
type Box struct {
	sandbox.Client
	// Ref is the sandbox: calls naming another ID or token are refused as the engine refuses
	// them, 404 not found.
	Ref   sandbox.SandboxRef
	Agent *agentvmtest.Agent

	mu      sync.Mutex
	execs   []sandbox.ExecRequest
	dials   int
	conns   []net.Conn // every connection dialed, for Cut
	refuse  int        // dials still to refuse
	refused int
}

// New returns a box on ref whose agent is agent.
func New(agent *agentvmtest.Agent, ref sandbox.SandboxRef) *Box {
	return &Box{Ref: ref, Agent: agent}
}

func (b *Box) check(op string, ref sandbox.SandboxRef) error {
	if ref.ID != b.Ref.ID || ref.Token != b.Ref.Token {
		return &sandbox.Error{Op: op, Status: 404, Message: "sandbox not found", Kind: sandbox.ErrNotFound}
	}
	return nil
}

// DialPort connects to the agent on wire.AgentPort; nothing else listens in the box, so another
// port is the relay's 502, unavailable.
func (b *Box) DialPort(ctx context.Context, ref sandbox.SandboxRef, port int) (sandbox.Conn, error) {
	if err := b.check("relay", ref); err != nil {
		return nil, err
	}
	if port != wire.AgentPort {
		return nil, &sandbox.Error{Op: "relay", Status: 502, Message: fmt.Sprintf("guest unreachable on port %d", port), Kind: sandbox.ErrUnavailable}
	}
	b.mu.Lock()
	b.dials++
	refuse := b.refuse > 0
	if refuse {
		b.refuse--
		b.refused++
	}
	b.mu.Unlock()
	if refuse {
		return nil, &sandbox.Error{Op: "relay", Status: 502, Message: "nothing listens on the port in the sandbox", Kind: sandbox.ErrUnavailable}
	}
	c, err := b.Agent.Dial(ctx)
	if err != nil {
		return nil, &sandbox.Error{Op: "relay", Status: 502, Message: err.Error(), Kind: sandbox.ErrUnavailable}
	}
	b.mu.Lock()
	b.conns = append(b.conns, c)
	b.mu.Unlock()
	return halfCloser{c}, nil
}

// Exec records the request and runs it on the embedded Client, or, without one, succeeds with
// exit 0 and no output (the credential write boxlink makes).
func (b *Box) Exec(ctx context.Context, ref sandbox.SandboxRef, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if err := b.check("exec", ref); err != nil {
		return sandbox.ExecResult{}, err
	}
	b.mu.Lock()
	b.execs = append(b.execs, req)
	b.mu.Unlock()
	if b.Client != nil {
		return b.Client.Exec(ctx, ref, req)
	}
	return sandbox.ExecResult{}, nil
}

// Execs returns the exec requests the box was sent, in order.
func (b *Box) Execs() []sandbox.ExecRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]sandbox.ExecRequest(nil), b.execs...)
}

// Dials returns how many connections to the agent were dialed.
func (b *Box) Dials() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dials
}

// Cut closes every connection dialed so far, as the engine closes a sandbox's relays when it
// hibernates it.
func (b *Box) Cut() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.conns = nil
}

// RefuseNext makes the next n dials fail as the relay's 502 (nothing listens on the port yet).
func (b *Box) RefuseNext(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refuse = n
}

// Refused returns how many dials RefuseNext has refused.
func (b *Box) Refused() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.refused
}

// halfCloser is an in-memory connection as a relay connection. Its CloseWrite closes it whole:
// gRPC, the only protocol spoken over it, never half-closes.
type halfCloser struct{ net.Conn }

func (c halfCloser) CloseWrite() error { return c.Conn.Close() }
