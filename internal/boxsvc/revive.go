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
	if rerr := s.revive(ctx, id); rerr != nil {
		return errors.Join(err, rerr)
	}
	return call()
}

// revive starts the box's workflow from its row (see revived); a deleted box stays gone.
func (s *Service) revive(ctx context.Context, id cocoonbox.BoxID) error {
	b, err := s.Store.BoxByID(ctx, id)
	if err != nil {
		return err
	}
	if b.DeletedAt != nil {
		return cocoonbox.Errorf(cocoonbox.ENotFound, "box %s not found", id)
	}
	policy, err := s.PolicyDefaults(ctx, b.Owner)
	if err != nil {
		return err
	}
	kept, err := s.Store.BoxPolicy(ctx, id)
	if err != nil {
		return err
	}
	if len(kept) > 2 { // not "{}": the box's own policy, kept at its create or last change
		if err := json.Unmarshal(kept, &policy); err != nil {
			return err
		}
	}
	err = workflows.Revive(ctx, s.Temporal, workflows.BoxWorkflowInput{
		BoxID: id, Owner: b.Owner, OwnerName: s.who(ctx, b.Owner), Name: b.Name, Size: b.Size,
		Policy: policy, CreateWait: s.CreateWait,
	})
	if err != nil {
		return err
	}
	if s.Logger != nil {
		s.Logger.Info("box workflow missing: started it asleep, to wake from its newest snapshot", "box", id)
	}
	s.audit(ctx, "restore", id, "revived", map[string]any{
		"detail": "its workflow was missing: started asleep, to wake from its newest snapshot"})
	return nil
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
