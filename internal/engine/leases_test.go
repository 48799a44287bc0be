package engine_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine"
	"github.com/loomhand/cocoonbox/internal/engine/enginetest"
	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// TestLeaseExpiry: at the deadline a sandbox is gone to callers at once and the reaper
// destroys it — hibernated or not; a renewed lease survives.
func TestLeaseExpiry(t *testing.T) {
	h := newHarness(t)
	running := h.claim(rootToken, sandbox.ClaimRequest{TTLSeconds: 60})
	sleeping := h.claim(rootToken, sandbox.ClaimRequest{TTLSeconds: 60})
	renewed := h.claim(rootToken, sandbox.ClaimRequest{TTLSeconds: 60})
	h.must(204, "POST", "/v1/sandboxes/"+sleeping.ID+"/hibernate", sleeping.Token, nil)

	h.clock.Advance(59 * time.Second)
	h.must(200, "POST", "/v1/sandboxes/"+renewed.ID+"/renew", renewed.Token, sandbox.RenewRequest{TTLSeconds: 120})
	h.tick()
	if n := len(h.list(rootToken, "")); n != 3 {
		t.Fatalf("%d sandboxes before the deadline", n)
	}

	h.clock.Advance(time.Second)
	// Gone to callers before the reaper has run.
	h.must(404, "POST", "/v1/sandboxes/"+running.ID+"/wake", running.Token, nil)
	if rows := h.list(rootToken, ""); len(rows) != 1 || rows[0].ID != renewed.ID {
		t.Fatalf("listed after the deadline: %+v", rows)
	}
	h.tick()
	if boxes := h.rt.Boxes(); !slices.Equal(boxes, []string{renewed.ID}) {
		t.Fatalf("runtime holds %v after reaping", boxes)
	}
	j := h.journal()
	for _, id := range []string{running.ID, sleeping.ID} {
		if !slices.Contains(j, "release "+id+" expired") {
			t.Fatalf("journal %q lacks the expiry of %s", j, id)
		}
	}
}

// TestReaperRetriesFailedDestroy: a destroy that fails is retried until it succeeds; the
// sandbox is gone to callers either way.
func TestReaperRetriesFailedDestroy(t *testing.T) {
	h := newHarness(t)
	sb := h.claim(rootToken, sandbox.ClaimRequest{})
	h.rt.FailNext(enginetest.OpDestroy, errors.New("busy"))
	h.must(204, "POST", "/v1/sandboxes/"+sb.ID+"/release", sb.Token, nil)
	h.must(404, "POST", "/v1/sandboxes/"+sb.ID+"/release", sb.Token, nil)
	if !slices.Contains(h.rt.Boxes(), sb.ID) || len(h.records()) != 1 {
		t.Fatal("the failed destroy should leave the box and its record for a retry")
	}
	h.tick()
	if slices.Contains(h.rt.Boxes(), sb.ID) || len(h.records()) != 0 {
		t.Fatal("the reaper did not retry the destroy")
	}
}

// TestIdleHibernate: a pool's idle_hibernate_seconds hibernates its claimed boxes after that
// long without data-plane use — but never one with an open relay.
func TestIdleHibernate(t *testing.T) {
	h := newHarness(t)
	if err := h.rt.ServePort(7, echo); err != nil {
		t.Fatal(err)
	}
	h.must(200, "PUT", "/v1/pools", rootToken, sandbox.PoolsRequest{Pools: []sandbox.PoolSpec{
		{Template: "base", Warm: 0, IdleHibernateSeconds: 60},
	}})
	idle := h.claim(rootToken, sandbox.ClaimRequest{})
	busy := h.claim(rootToken, sandbox.ClaimRequest{})
	other := h.claim(rootToken, sandbox.ClaimRequest{Size: "medium"}) // no pool spec: never idles
	conn := dialRelay(t, h, busy.ID, 7, busy.Token)
	defer conn.Close()

	h.clock.Advance(59 * time.Second)
	h.tick()
	if h.row(idle.ID).Hibernated {
		t.Fatal("hibernated before its idle time")
	}
	h.clock.Advance(2 * time.Second)
	h.tick()
	if !h.row(idle.ID).Hibernated || h.rt.BoxState(idle.ID) != runtime.StateHibernated {
		t.Fatal("idle box not hibernated")
	}
	if h.row(busy.ID).Hibernated || h.row(other.ID).Hibernated {
		t.Fatal("a box with an open relay, or without an idle policy, was hibernated")
	}
	// The relay still carries bytes.
	roundTrip(t, conn, "still here")
	if j := h.journal(); j[len(j)-1] != "hibernate "+idle.ID+" idle" {
		t.Fatalf("journal tail %q", j[len(j)-1])
	}
}

// TestRunLoops runs the real background loops (not Tick) and sees them reap and refill.
func TestRunLoops(t *testing.T) {
	h := newHarness(t, func(o *engine.Options) { o.TickInterval = 5 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.eng.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	sb := h.claim(rootToken, sandbox.ClaimRequest{TTLSeconds: 10})
	h.must(200, "PUT", "/v1/pools", rootToken, sandbox.PoolsRequest{Pools: []sandbox.PoolSpec{{Template: "desktop", Warm: 1}}})
	testutil.Eventually(t, testutil.WaitShort, "the pool to fill", func() bool { return h.info().Pools[0].Warm == 1 })
	h.clock.Advance(10 * time.Second)
	testutil.Eventually(t, testutil.WaitShort, "the reaper", func() bool { return !slices.Contains(h.rt.Boxes(), sb.ID) })
}

func echo(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = c.(*net.TCPConn).CloseWrite()
			return
		}
	}
}
