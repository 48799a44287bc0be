package boxsvc

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/workflows"
)

// A box's workflow can be missing while its row says the box exists: a deployment restored from
// a backup (internal/backup) runs on a new Temporal, which has none of the old workflows. The
// first call that needs the workflow then starts one, asleep without a sandbox, with the policy
// kept on the row, and the call goes on; the box's next wake restores its newest snapshot.

// revived runs call, and when it finds the box's workflow missing, revives the box and runs call
// once more.
func (s *Service) revived(ctx context.Context, id cocoonbox.BoxID, call func() error) error {
	err := call()
	if !workflows.Missing(err) || s.Store == nil {
		return err
	}
	revived, rerr := s.revive(ctx, id)
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	if !revived {
		return err
	}
	return call()
}

// revive starts the box's workflow from its row (see revived) and says whether it did. A deleted
// box stays gone, and so does one whose workflow Temporal still has: an update of a workflow that
// ended (an operator terminated it) is refused as not found too, and the reconciler marks such
// a box failed rather than this starting it again.
func (s *Service) revive(ctx context.Context, id cocoonbox.BoxID) (bool, error) {
	b, err := s.Store.BoxByID(ctx, id)
	if err != nil {
		return false, err
	}
	if b.DeletedAt != nil {
		return false, nil
	}
	if started, err := workflows.Started(ctx, s.Temporal, id); started || err != nil {
		return false, err
	}
	policy, err := s.revivedPolicy(ctx, b.Owner, id)
	if err != nil {
		return false, err
	}
	err = workflows.Revive(ctx, s.Temporal, workflows.BoxWorkflowInput{
		BoxID: id, Owner: b.Owner, OwnerName: s.who(ctx, b.Owner), Name: b.Name, Size: b.Size,
		Policy: policy, CreateWait: s.CreateWait,
	})
	if err != nil {
		return false, err
	}
	if s.Logger != nil {
		s.Logger.Info("box workflow missing: started it asleep, to wake from its newest snapshot", "box", id)
	}
	s.audit(ctx, "restore", id, "revived", map[string]any{
		"detail": "its workflow was missing: started asleep, to wake from its newest snapshot"})
	return true, nil
}

// revivedPolicy is the policy kept on the box's row, or its owner's defaults for a row without
// one (a box from before schema 13).
func (s *Service) revivedPolicy(ctx context.Context, owner string, id cocoonbox.BoxID) (workflows.Policy, error) {
	p, ok, err := s.keptPolicy(ctx, id)
	if err != nil || ok {
		return p, err
	}
	return s.PolicyDefaults(ctx, owner)
}

// keptPolicy is the copy of the box's policy on its row; ok is false for a row without one.
func (s *Service) keptPolicy(ctx context.Context, id cocoonbox.BoxID) (p workflows.Policy, ok bool, err error) {
	kept, err := s.Store.BoxPolicy(ctx, id)
	if err != nil || len(kept) <= 2 { // "{}"
		return p, false, err
	}
	err = json.Unmarshal(kept, &p)
	return p, err == nil, err
}

// recordsRuns reports whether the box's policy, as its row keeps it, records every agent run.
// A row that cannot be read records nothing more (logged): the run itself goes ahead.
func (s *Service) recordsRuns(ctx context.Context, id cocoonbox.BoxID) bool {
	p, _, err := s.keptPolicy(ctx, id)
	if err != nil && s.Logger != nil {
		s.Logger.Warn("read the box's policy for its run", "box", id, "err", err)
	}
	return p.RecordRuns
}

// keepPolicy copies the box's policy onto its row, for revive (best effort, logged: a row
// without it revives with the owner's defaults).
func (s *Service) keepPolicy(ctx context.Context, id cocoonbox.BoxID, p workflows.Policy) {
	b, err := json.Marshal(p)
	if err == nil {
		err = s.Store.SetBoxPolicy(ctx, id, b)
	}
	if err != nil && s.Logger != nil {
		s.Logger.Warn("keep the box's policy on its row", "box", id, "err", err)
	}
}
