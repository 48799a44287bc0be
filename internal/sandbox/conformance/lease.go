package conformance

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/testutil"
)

// leaseExpiry checks the reaper: a sandbox is gone after its lease, hibernated or not.
func (s *suite) leaseExpiry(t *testing.T) {
	t.Parallel()
	running := s.claimWith(t, s.h.Root, sandbox.ClaimRequest{ClaimRef: s.ref("lease-running"), TTLSeconds: 2})
	asleep := s.claimWith(t, s.h.Root, sandbox.ClaimRequest{ClaimRef: s.ref("lease-hibernated"), TTLSeconds: 2})
	if err := s.h.Root.Hibernate(s.ctx(t), asleep.SandboxRef); err != nil {
		t.Fatalf("hibernate: %v", err)
	}
	s.waitReaped(t, "lease-running", running.SandboxRef)
	s.waitReaped(t, "lease-hibernated", asleep.SandboxRef)
}

// waitReaped waits until the sandbox is neither listed nor reachable.
func (s *suite) waitReaped(t *testing.T, name string, sb sandbox.SandboxRef) {
	t.Helper()
	testutil.EventuallyReports(t, time.Minute, sb.ID+" reaped at its deadline", func() (bool, string) {
		if _, ok := s.row(t, s.ref(name), sb.ID); ok {
			return false, "still listed"
		}
		err := s.h.Root.Wake(s.ctx(t), sb)
		return errors.Is(err, sandbox.ErrNotFound), fmt.Sprintf("wake: %v", err)
	})
}

// infoAndStats checks the operator reads: info counts the claim, stats reports the size tier.
func (s *suite) infoAndStats(t *testing.T) {
	t.Parallel()
	sb := s.claim(t, "stats")
	info, err := s.h.Root.Info(s.ctx(t))
	if err != nil || info.Claimed < 1 {
		t.Fatalf("info with a live claim: claimed %d, %v", info.Claimed, err)
	}
	if info.Capabilities != nil && info.Runtime == "" {
		t.Errorf("info states capabilities but no runtime: %+v", info)
	}
	st, err := s.h.Root.Stats(s.ctx(t), sb.ID)
	if err != nil || st.ID != sb.ID {
		t.Fatalf("stats: %+v, %v", st, err)
	}
	tiers := map[string]struct {
		cpus int
		mem  int64
	}{
		sandbox.SizeSmall: {1, 512 << 20}, sandbox.SizeMedium: {2, 1 << 30}, sandbox.SizeLarge: {4, 4 << 30},
		sandbox.SizeXLarge: {4, 8 << 30}, sandbox.Size2XLarge: {8, 16 << 30},
	}
	size := s.h.Size
	if size == "" {
		size = sandbox.SizeSmall
	}
	if want := tiers[size]; st.CPUCount != want.cpus || st.MemTotalBytes != want.mem {
		t.Errorf("stats of a %s sandbox: %d CPUs, %d bytes; want %d, %d", size, st.CPUCount, st.MemTotalBytes, want.cpus, want.mem)
	}
}

// restart checks that an engine restart forgets nothing: a running sandbox is still listed and
// usable, a hibernated one still wakes with its disk, and leases still expire.
func (s *suite) restart(t *testing.T) {
	if s.h.RestartEngine == nil {
		t.Skip("the harness cannot restart this engine")
	}
	c := s.h.Root
	running := s.claim(t, "restart-running")
	asleep := s.claim(t, "restart-hibernated")
	short := s.claimWith(t, c, sandbox.ClaimRequest{ClaimRef: s.ref("restart-lease"), TTLSeconds: 5})
	s.sh(t, running.SandboxRef, "echo running > /root/f")
	s.sh(t, asleep.SandboxRef, "echo hibernated > /root/f")
	if err := c.Hibernate(s.ctx(t), asleep.SandboxRef); err != nil {
		t.Fatalf("hibernate: %v", err)
	}

	s.h.RestartEngine(t)

	if _, ok := s.row(t, s.ref("restart-running"), running.ID); !ok {
		t.Fatalf("running sandbox %s is not listed after the restart", running.ID)
	}
	if out := s.sh(t, running.SandboxRef, "cat /root/f"); out != "running\n" {
		t.Fatalf("running sandbox after the restart: %q", out)
	}
	if row, ok := s.row(t, s.ref("restart-hibernated"), asleep.ID); !ok || !row.Hibernated {
		t.Fatalf("hibernated sandbox after the restart: %+v (listed %v), want hibernated", row, ok)
	}
	if err := c.Wake(s.ctx(t), asleep.SandboxRef); err != nil {
		t.Fatalf("wake after the restart: %v", err)
	}
	if out := s.sh(t, asleep.SandboxRef, "cat /root/f"); out != "hibernated\n" {
		t.Fatalf("hibernated sandbox woken after the restart: %q", out)
	}
	s.waitReaped(t, "restart-lease", short.SandboxRef)
}
