package devstack_test

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

// testLeaseIdle is the box's lease idle in TestDesktopLeaseNeverStrands: long enough to see an
// open control connection keep the lease past it, short enough to wait out.
const testLeaseIdle = 5 * time.Second

// TestDesktopLeaseNeverStrands: `cocoonbox desktop --control`, the CLI as shipped, takes the
// desktop's control lease and gives it back whichever way it ends. Interrupted (Ctrl-C), it hands
// the lease back before it exits; killed outright, it cannot, and the box releases the lease
// lease idle after its control connection closed, with an event saying why. While a viewer drives
// through the tunnel the lease outlasts lease idle.
func TestDesktopLeaseNeverStrands(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	cli := buildCLI(t)
	cfg := boxConfig(t)
	cfg.Template = "desktop"
	e := newDesktopEnv(t, cfg, 6*time.Minute)
	ctx := e.ctx
	v, err := e.d.Boxes.Get(ctx, e.owner.ID, e.id)
	if err != nil {
		t.Fatal(err)
	}
	p := v.Policy
	p.LeaseIdle = testLeaseIdle
	if _, err := e.d.Boxes.SetPolicy(ctx, e.owner.ID, e.id, p); err != nil {
		t.Fatal(err)
	}
	controller := func() string {
		v, err := e.d.Boxes.Get(ctx, e.owner.ID, e.id)
		if err != nil {
			return "(get the box: " + err.Error() + ")"
		}
		return v.Controller
	}
	// drive connects a viewer through the tunnel, which opens the tunnel's control connection.
	drive := func(t *testing.T, tun *desktopTunnel) net.Conn {
		t.Helper()
		conn, err := net.DialTimeout("tcp", tun.addr, testutil.WaitShort)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		c, err := rfbHandshakeAuth(conn, tun.password)
		if err != nil {
			t.Fatalf("a viewer through the control tunnel: %v", err)
		}
		if _, err := c.frame(); err != nil {
			t.Fatalf("a frame through the control tunnel: %v", err)
		}
		return conn
	}
	exited := func(t *testing.T, tun *desktopTunnel) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- tun.cmd.Wait() }()
		select {
		case err := <-done:
			t.Logf("cocoonbox desktop exited: %v", err)
		case <-time.After(testutil.WaitShort):
			t.Fatalf("cocoonbox desktop did not exit; it said:\n%s", tun.stderr)
		}
	}

	t.Run("interrupted", func(t *testing.T) {
		tun := startDesktopTunnel(t, cli, e, "--control")
		if got := controller(); got != e.owner.ID {
			t.Fatalf("controller %q with the tunnel open, want %s", got, e.owner.ID)
		}
		drive(t, tun)
		if err := consistently(ctx, 2*testLeaseIdle, func() error {
			if got := controller(); got != e.owner.ID {
				return fmt.Errorf("the lease went to %q while a viewer drove through the tunnel", got)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := tun.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		exited(t, tun)
		if got := controller(); got != "" {
			t.Fatalf("controller %q once the interrupted tunnel exited, want none", got)
		}
		if !strings.Contains(tun.stderr.String(), "handed the desktop back") {
			t.Fatalf("the tunnel did not say it handed the desktop back:\n%s", tun.stderr)
		}
	})

	t.Run("killed", func(t *testing.T) {
		tun := startDesktopTunnel(t, cli, e, "--control")
		drive(t, tun)
		if err := tun.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		exited(t, tun)
		if got := controller(); got != e.owner.ID {
			t.Fatalf("controller %q at once after the kill, want %s until lease idle", got, e.owner.ID)
		}
		testutil.Eventually(t, testLeaseIdle+time.Minute, "the box to release the killed tunnel's lease", func() bool {
			return controller() == ""
		})
		after := time.Since(killed)
		t.Logf("released %v after the kill (lease idle %v)", after.Round(time.Millisecond), testLeaseIdle)
		if after < testLeaseIdle {
			t.Fatalf("released %v after the kill, before lease idle %v", after, testLeaseIdle)
		}
		evs, err := e.d.Boxes.ListEvents(ctx, e.owner.ID, e.id, 0, 500)
		if err != nil {
			t.Fatal(err)
		}
		want := "idle: " + e.owner.ID + " had no control connection for " + testLeaseIdle.String()
		for _, ev := range evs {
			if ev.Action == "box.lease_released" && strings.Contains(string(ev.Detail), want) {
				return
			}
		}
		t.Fatalf("no box.lease_released event saying %q among %d events", want, len(evs))
	})
}
