package boxsvc

import (
	"context"
	"fmt"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// Bounds of what a user may set in a box's policy.
const (
	MinIdle          = time.Minute
	MaxIdle          = 30 * 24 * time.Hour
	MaxKeepSnapshots = 1000
	MinSnapshotEvery = 5 * time.Minute
	MaxSnapshotEvery = 30 * 24 * time.Hour
	MinLeaseIdle     = 30 * time.Second
	MaxLeaseIdle     = 24 * time.Hour
)

// PolicyChange is a user's change of a box's policy, or of their defaults for new boxes: nil
// fields keep their value.
type PolicyChange struct {
	IdleSeconds          *int64 // 0: never hibernate by itself
	Durable              *bool
	KeepSnapshots        *int
	SnapshotEverySeconds *int64 // 0: never seal a running box by itself
	LeaseIdleSeconds     *int64 // how long a control lease outlives its holder's last connection
	RecordRuns           *bool  // record the desktop of every agent run on the box
}

// empty reports whether c changes nothing.
func (c PolicyChange) empty() bool {
	return c.IdleSeconds == nil && c.Durable == nil && c.KeepSnapshots == nil && c.SnapshotEverySeconds == nil &&
		c.LeaseIdleSeconds == nil && c.RecordRuns == nil
}

// Validate names the first field of c a box cannot take.
func (c PolicyChange) Validate() error {
	seconds := func(field string, n *int64, lo, hi time.Duration, zero string) error {
		if n == nil || (*n == 0 && zero != "") {
			return nil
		}
		if *n < int64(lo/time.Second) || *n > int64(hi/time.Second) {
			if zero != "" {
				return cocoonbox.Invalid(field, fmt.Sprintf("must be 0 (%s) or from %d to %d seconds, got %d", zero, int64(lo/time.Second), int64(hi/time.Second), *n))
			}
			return cocoonbox.Invalid(field, fmt.Sprintf("must be from %d to %d seconds, got %d", int64(lo/time.Second), int64(hi/time.Second), *n))
		}
		return nil
	}
	if err := seconds("idle_seconds", c.IdleSeconds, MinIdle, MaxIdle, "never by itself"); err != nil {
		return err
	}
	if n := c.KeepSnapshots; n != nil && (*n < 1 || *n > MaxKeepSnapshots) {
		return cocoonbox.Invalid("keep_snapshots", fmt.Sprintf("must be from 1 to %d (the newest snapshot is always kept), got %d", MaxKeepSnapshots, *n))
	}
	if err := seconds("snapshot_every_seconds", c.SnapshotEverySeconds, MinSnapshotEvery, MaxSnapshotEvery, "never by itself"); err != nil {
		return err
	}
	if err := seconds("lease_idle_seconds", c.LeaseIdleSeconds, MinLeaseIdle, MaxLeaseIdle, ""); err != nil {
		return err
	}
	if c.empty() {
		return cocoonbox.Invalid("policy", "name at least one of idle_seconds, durable, keep_snapshots, snapshot_every_seconds, lease_idle_seconds and record_runs to change")
	}
	return nil
}

// input is the setpolicy update that makes c's changes.
func (c PolicyChange) input() workflows.SetPolicyInput {
	in := workflows.SetPolicyInput{DurableHibernate: c.Durable, KeepSnapshots: c.KeepSnapshots, RecordRuns: c.RecordRuns}
	in.IdleAfter, in.SnapshotEvery, in.LeaseIdle = durationOf(c.IdleSeconds), durationOf(c.SnapshotEverySeconds), durationOf(c.LeaseIdleSeconds)
	return in
}

func durationOf(secs *int64) *time.Duration {
	if secs == nil {
		return nil
	}
	d := time.Duration(*secs) * time.Second
	return &d
}

// Apply changes p as c says.
func (c PolicyChange) Apply(p *workflows.Policy) { c.input().ApplyTo(p) }

// ChangePolicy changes the fields of the box's policy that c sets (admin).
func (s *Service) ChangePolicy(ctx context.Context, caller string, id cocoonbox.BoxID, c PolicyChange) (View, error) {
	if err := c.Validate(); err != nil {
		return View{}, err
	}
	v, err := s.update(ctx, caller, id, cocoonbox.RoleAdmin, workflows.UpdateSetPolicy, c.input())
	if err == nil {
		s.keepPolicy(ctx, id, v.Policy)
	}
	return v, err
}

// PolicyDefaults is the policy a new box of the caller gets: the server's, with the caller's
// own defaults over it.
func (s *Service) PolicyDefaults(ctx context.Context, caller string) (workflows.Policy, error) {
	d, err := s.Store.PolicyDefaults(ctx, caller)
	if err != nil {
		return workflows.Policy{}, err
	}
	p := s.Policy
	PolicyChange(d).Apply(&p)
	return p, nil
}

// SetPolicyDefaults changes the fields of the caller's defaults for new boxes that c sets;
// existing boxes keep their policy.
func (s *Service) SetPolicyDefaults(ctx context.Context, caller string, c PolicyChange) (workflows.Policy, error) {
	if err := c.Validate(); err != nil {
		return workflows.Policy{}, err
	}
	if err := s.Store.SetPolicyDefaults(ctx, caller, store.PolicyDefaults(c)); err != nil {
		return workflows.Policy{}, err
	}
	return s.PolicyDefaults(ctx, caller)
}
