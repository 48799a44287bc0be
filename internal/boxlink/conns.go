package boxlink

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// A call's connection to a box's agent is kept for the next call: dialing it (the engine's
// relay, then HTTP/2) costs about 40 ms, as much as the call itself, and an agent run calls the
// same box's agent on every step. One connection per sandbox carries every call to it, each on
// a stream of its own; it is dropped when a call on it finds it down (the box hibernated, or
// went), and closed once unused for connIdle.

// connIdle is how long an unused connection to an agent is kept.
const connIdle = 2 * time.Minute

// agentConn is one sandbox's kept connection.
type agentConn struct {
	conn *grpc.ClientConn

	mu      sync.Mutex
	dialErr error     // the relay's last refusal, which says more than gRPC's UNAVAILABLE
	used    time.Time // when a call last took it
}

// lastDialErr returns the relay's refusal of the last dial, if it failed.
func (c *agentConn) lastDialErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dialErr
}

// conns keeps the connections of a Link; its zero value is empty.
type conns struct {
	mu    sync.Mutex
	m     map[sandbox.SandboxRef]*agentConn
	swept time.Time
}

// get returns ref's kept connection, or a new one dialed through sb's relay on first use.
func (p *conns) get(sb sandbox.Client, ref sandbox.SandboxRef) (*agentConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.sweep(now)
	if c := p.m[ref]; c != nil {
		c.mu.Lock()
		c.used = now
		c.mu.Unlock()
		return c, nil
	}
	c := &agentConn{used: now}
	conn, err := grpc.NewClient("passthrough:///agent",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(wire.StreamWindow), grpc.WithInitialConnWindowSize(wire.ConnWindow),
		grpc.WithReadBufferSize(wire.SocketBuffer), grpc.WithWriteBufferSize(wire.SocketBuffer),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			nc, err := sb.DialPort(ctx, ref, wire.AgentPort)
			c.mu.Lock()
			c.dialErr = err
			c.mu.Unlock()
			return nc, err
		}))
	if err != nil {
		return nil, fmt.Errorf("agent client: %w", err)
	}
	c.conn = conn
	if p.m == nil {
		p.m = map[sandbox.SandboxRef]*agentConn{}
	}
	p.m[ref] = c
	return c, nil
}

// dropIfDown closes c if it is still ref's kept connection and is not up, so the next call
// dials afresh rather than wait out gRPC's reconnect backoff. A connection that is up stays: the
// UNAVAILABLE that led here was then not its own but the agent's answer or the caller's side (a
// client that hung up on a shell while its output was being passed on), and closing it would
// end every other call on it.
func (p *conns) dropIfDown(ref sandbox.SandboxRef, c *agentConn) {
	if c.conn.GetState() == connectivity.Ready {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m[ref] == c {
		delete(p.m, ref)
		_ = c.conn.Close() // calls in flight on it end with Canceled
	}
}

// sweep closes connections unused for connIdle, at most once a minute. Called with p.mu held.
func (p *conns) sweep(now time.Time) {
	if now.Sub(p.swept) < time.Minute {
		return
	}
	p.swept = now
	for ref, c := range p.m {
		c.mu.Lock()
		idle := now.Sub(c.used) > connIdle
		c.mu.Unlock()
		if idle {
			delete(p.m, ref)
			_ = c.conn.Close()
		}
	}
}
