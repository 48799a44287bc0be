package worker

import (
	"cmp"
	"context"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/activities"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// drainActivities are a node drain's activities over the store and the boxes' workflows.
func drainActivities(c client.Client, st *store.Store, tokens activities.TokenStore, template string, deadAfter time.Duration) *activities.Drain {
	return &activities.Drain{
		Placeable: func(ctx context.Context, box cocoonbox.BoxID) error {
			b, err := st.BoxByID(ctx, box)
			if err != nil {
				return err
			}
			all, err := st.ListNodes(ctx)
			if err != nil {
				return err
			}
			// The box's own node is draining, so Pick passes it over.
			_, err = nodes.Pick(all, nodes.Request{Template: template, Size: b.Size, Net: sandbox.NetNone}, time.Now(), cmp.Or(deadAfter, nodes.DefaultDeadAfter))
			return err
		},
		Boxes: func(ctx context.Context, node string) ([]cocoonbox.BoxID, error) {
			all, err := st.ListNodes(ctx)
			if err != nil {
				return nil, err
			}
			for _, n := range all {
				if n.ID != node {
					continue
				}
				on, err := st.SandboxesOn(ctx, n)
				if err != nil {
					return nil, err
				}
				ids := make([]cocoonbox.BoxID, len(on))
				for i, s := range on {
					ids[i] = cocoonbox.BoxID(s.BoxID)
				}
				return ids, nil
			}
			return nil, cocoonbox.Errorf(cocoonbox.ENotFound, "node %s is not registered", node)
		},
		Holds: func(ctx context.Context, box cocoonbox.BoxID, node string) (bool, error) {
			ref, err := tokens.SandboxToken(ctx, string(box))
			if cocoonbox.ErrorCode(err) == cocoonbox.ENotFound {
				return false, nil
			}
			return err == nil && ref.Node == node, err
		},
		Move: func(ctx context.Context, box cocoonbox.BoxID, node string) (bool, bool, error) {
			// One update ID per drain run and box: a retried activity waits on the same move.
			info := activity.GetInfo(ctx)
			ctx = workflows.WithUpdateID(ctx, "move/"+node+"/"+string(box)+"/"+info.WorkflowExecution.RunID)
			res, err := workflows.Move(ctx, c, box, node)
			return res.Moved, res.OnWake, err
		},
	}
}
