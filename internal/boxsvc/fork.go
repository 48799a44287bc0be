package boxsvc

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// ForkRequest asks for copies of a box with its memory.
type ForkRequest struct {
	Count int    // how many forks, 1 to workflows.MaxForks; 0 is 1
	Name  string // the forks are named Name-1, Name-2, … (the first numbers free); "" is the box's name + "-fork"
}

// Forked is what a fork made: the forks, in the order of their names, and how long the box was
// paused for the copy (at most: the engine call that paused it).
type Forked struct {
	Boxes  []View
	Paused time.Duration
}

// Fork copies the box, running or hibernated, with its disk and its memory into new boxes of
// the caller's, which go on from that moment: the windows the box had open, its processes and
// what they held. The box is paused only for the copy. Each fork gets an identity of its own
// (machine ID, SSH host keys), counts toward the caller's quota and records its parent. It
// takes the role that could copy everything out of the box anyway: admin (the owner's).
func (s *Service) Fork(ctx context.Context, caller string, id cocoonbox.BoxID, req ForkRequest) (Forked, error) {
	count := cmp.Or(req.Count, 1)
	if count < 1 || count > workflows.MaxForks {
		return Forked{}, cocoonbox.Invalid("count", fmt.Sprintf("must be from 1 to %d, got %d", workflows.MaxForks, req.Count))
	}
	a, err := s.authorize(ctx, caller, id, cocoonbox.RoleAdmin)
	if err != nil {
		return Forked{}, err
	}
	prefix := req.Name
	if prefix == "" {
		prefix = forkPrefix(a.box.Name)
	}
	if err := cocoonbox.ValidateBoxName(prefix + "-" + strconv.Itoa(workflows.MaxForks)); err != nil {
		return Forked{}, err
	}
	if err := s.withinBoxHours(ctx, func(ctx context.Context) (store.BoxHours, error) { return s.Store.BoxHoursOfUser(ctx, caller) }); err != nil {
		return Forked{}, err
	}
	policy, err := s.revivedPolicy(ctx, a.box.Owner, id)
	if err != nil {
		return Forked{}, err
	}
	names, err := s.forkNames(ctx, caller, prefix, count)
	if err != nil {
		return Forked{}, err
	}
	// The forks' rows first, inside the caller's quota, so a fork that would not fit is refused
	// before the box is paused for a checkpoint no one would use.
	now := time.Now()
	rows := make([]store.Box, 0, count)
	drop := func() {
		for _, r := range rows {
			s.dropUnstarted(ctx, r.ID)
		}
	}
	quota := store.BoxQuota{Boxes: s.Quota.Boxes, VCPUs: s.Quota.VCPUs, MemoryMB: s.Quota.MemoryMB}
	for k := range count {
		fid := forkID(ctx, caller, id, k)
		if row, err := s.Store.BoxByID(ctx, fid); err == nil && row.Owner == caller && row.Parent == id {
			rows = append(rows, row) // a fork the first send of this request made
			continue
		}
		row, err := s.Store.CreateBoxWithin(ctx, store.NewBox{
			ID: fid, Owner: caller, Name: names[0], Size: a.box.Size, Parent: id, ForkedAt: now,
		}, quota)
		if err != nil {
			drop()
			return Forked{}, err
		}
		names = names[1:]
		rows = append(rows, row)
	}
	var res workflows.ForkResult
	err = s.revived(ctx, id, func() (err error) {
		res, err = workflows.Update[workflows.ForkResult](once(ctx, caller, workflows.UpdateFork), s.Temporal, id, workflows.UpdateFork,
			workflows.ForkInput{ForkID: string(rows[0].ID), Count: count, By: s.who(ctx, caller)})
		return err
	})
	if err != nil {
		drop()
		return Forked{}, err
	}
	owner := s.who(ctx, caller)
	origin := &workflows.ForkOrigin{Parent: id, CheckpointID: res.CheckpointID, Node: res.Node, At: res.At}
	views := make([]View, len(rows))
	errs := make([]error, len(rows))
	var wg sync.WaitGroup
	for i, r := range rows {
		wg.Go(func() {
			st, err := workflows.Create(ctx, s.Temporal, workflows.BoxWorkflowInput{
				BoxID: r.ID, Owner: caller, OwnerName: owner, Name: r.Name, Size: r.Size,
				Policy: policy, CreateWait: s.CreateWait, Fork: origin,
			})
			if err != nil {
				s.dropUnstarted(ctx, r.ID)
				errs[i] = err
				return
			}
			s.audit(ctx, caller, r.ID, "create", map[string]any{"name": r.Name, "size": r.Size, "forked_from": id})
			s.keepPolicy(ctx, r.ID, st.Policy)
			views[i] = View{Status: st, Name: r.Name, Owner: caller, Size: r.Size, Role: cocoonbox.RoleOwner,
				CreatedAt: r.CreatedAt, Parent: id, ForkedAt: r.ForkedAt}
		})
	}
	wg.Wait()
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = string(r.ID)
	}
	s.audit(ctx, caller, id, "fork", map[string]any{"forks": ids, "checkpoint": res.CheckpointID, "paused_ms": res.Paused.Milliseconds()})
	out := Forked{Boxes: views, Paused: res.Paused}
	for i, err := range errs {
		if err != nil {
			return out, fmt.Errorf("fork %s (%s): %w", rows[i].Name, rows[i].ID, err)
		}
	}
	return out, nil
}

// forkID is the box ID of fork k of source: derived from the request's ID when it has one (a
// request sent again makes, and finds, the same forks), else random.
func forkID(ctx context.Context, caller string, source cocoonbox.BoxID, k int) cocoonbox.BoxID {
	return cocoonbox.BoxID("bx_" + requestHex(ctx, caller, "fork/"+string(source)+"/"+strconv.Itoa(k))[:16])
}

// forkPrefix is the default name of a box's forks, cut so that "-N" fits after it.
func forkPrefix(name string) string {
	const suffix = "-fork"
	room := cocoonbox.MaxBoxNameLen - len(suffix) - 3
	if r := []rune(name); len(r) > room {
		name = strings.TrimRight(string(r[:room]), "-_.")
	}
	return name + suffix
}

// forkNames are count names prefix-N for the smallest N the caller's live boxes do not use.
func (s *Service) forkNames(ctx context.Context, caller, prefix string, count int) ([]string, error) {
	boxes, err := s.Store.ListBoxes(ctx, caller)
	if err != nil {
		return nil, err
	}
	taken := map[string]bool{}
	for _, b := range boxes {
		taken[b.Name] = true
	}
	var names []string
	for n := 1; len(names) < count; n++ {
		if name := prefix + "-" + strconv.Itoa(n); !taken[name] {
			names = append(names, name)
		}
	}
	return names, nil
}
