// Package boxsvc is the one service layer over the box workflows that the gRPC API, MCP tools and
// the CLI share: it checks who may act on a box (its owner, or a share's role), then creates,
// wakes, hibernates, snapshots, restores, deletes and reads boxes only through their workflow
// (Update-with-Start, updates and the status query), so every state change is durable and
// visible in the Temporal UI. Bytes to and from a box (exec, files) go through the engine's API
// after the same check, and count as activity on the box.
package boxsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/objstore"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/workflows"
)

// DefaultPolicy is what a new box gets unless its service says otherwise: hibernate after 15
// idle minutes, sealed into a verified snapshot at every hibernate and every 30 minutes of
// activity, an hour's lease renewed as it goes, the newest 5 snapshots kept.
var DefaultPolicy = workflows.Policy{
	IdleAfter: 15 * time.Minute, LeaseTTL: time.Hour, KeepSnapshots: workflows.DefaultKeepSnapshots,
	DurableHibernate: true, SnapshotEvery: 30 * time.Minute,
}

// Service creates and drives boxes on behalf of callers, named by user ID.
type Service struct {
	Temporal client.Client
	Store    *store.Store
	// Recordings is the bucket runs' desktop recordings are read from; nil refuses replays as
	// not configured.
	Recordings objstore.Store
	Policy     workflows.Policy // applied to new boxes
	// CreateWait bounds how long a create waits for the engine to hand out a sandbox before the
	// box fails with the reason; 0 is workflows.DefaultCreateWait.
	CreateWait time.Duration
	// KeepAwakeEvery is how often a running exec touches its box; 0 is DefaultKeepAwakeEvery.
	KeepAwakeEvery time.Duration
	// Link reaches a box's sandbox for exec and files, and its agent (with the box's credential)
	// for the desktop verbs; without it those calls are unavailable.
	Link   *boxlink.Link
	Logger *slog.Logger
	// WatchEvery is how often WatchBox polls the workflow's status; 0 is 500 ms.
	WatchEvery time.Duration
	// Agent is the model gateway agent runs use; without a provider and base URL (a Service built
	// without a loaded configuration) runs are refused as not configured.
	Agent config.Agent
	// Quota bounds what each user may hold and run at once; its zero value is no limit.
	Quota config.Quota

	execs, streams inflight // this process's share of Quota.Execs and Quota.Streams
	touches        touches  // the touches held back (see touchEvery)
	texts          textHub  // the runs' streamed model text, for WatchRun
}

// View is a box as a caller sees it: the workflow's status with the box's record and the
// caller's role on it.
type View struct {
	workflows.Status
	// Waiting says what an operation in flight (a create, a wake, a restore, a snapshot, …) is
	// waiting for when its last try failed and it is tried again: "the engine: template … not built".
	Waiting string
	// Events, in a Watch to a driver, are the box's events since the previous view sent.
	Events    []store.Event
	Name      string
	Owner     string
	Size      cocoonbox.Size
	CreatedAt time.Time
	Role      cocoonbox.Role
	// Parent is the box this one was forked from, at ForkedAt; empty for a box created afresh.
	Parent   cocoonbox.BoxID
	ForkedAt time.Time
}

func view(a access, st workflows.Status) View {
	return View{Status: st, Name: a.box.Name, Owner: a.box.Owner, Size: a.box.Size, CreatedAt: a.box.CreatedAt, Role: a.role,
		Parent: a.box.Parent, ForkedAt: a.box.ForkedAt}
}

// CreateRequest describes a new box. ID may be set by the caller to make create idempotent: a
// second create with the same ID returns the same box.
type CreateRequest struct {
	ID   cocoonbox.BoxID
	Name string
	Size cocoonbox.Size
	// Network is the box's egress policy for life; a zero Policy means the service's
	// (Policy.Network, none when that is zero too).
	Network cocoonbox.Network
}

// Create starts the box's workflow (or finds it) and waits until the box runs. A new box must
// fit the owner's quota of boxes, vCPUs and memory (Quota).
func (s *Service) Create(ctx context.Context, owner string, req CreateRequest) (View, error) {
	if req.ID == "" {
		req.ID = cocoonbox.NewBoxID()
	}
	if req.Size == "" {
		req.Size = cocoonbox.DefaultSize
	}
	b := cocoonbox.Box{ID: req.ID, Owner: owner, Name: req.Name, Size: req.Size}
	if err := b.Validate(); err != nil {
		return View{}, err
	}
	if err := s.withinBoxHours(ctx, func(ctx context.Context) (store.BoxHours, error) { return s.Store.BoxHoursOfUser(ctx, owner) }); err != nil {
		return View{}, err
	}
	policy, err := s.PolicyDefaults(ctx, owner) // the server's, under the owner's own defaults
	if err != nil {
		return View{}, err
	}
	if req.Network.Policy != "" || len(req.Network.Allow) > 0 {
		policy.Network = req.Network
	}
	if policy.Network.Policy == "" {
		policy.Network.Policy = cocoonbox.NetworkNone
	}
	if err := policy.Network.Validate(); err != nil {
		return View{}, err
	}
	// The row is written here, inside the owner's quota, before the workflow starts: the quota
	// counts rows, and two creates racing must not both pass. The workflow's own create of the
	// row then finds it.
	quota := store.BoxQuota{Boxes: s.Quota.Boxes, VCPUs: s.Quota.VCPUs, MemoryMB: s.Quota.MemoryMB}
	row, err := s.Store.CreateBoxWithin(ctx, store.NewBox{ID: req.ID, Owner: owner, Name: req.Name, Size: req.Size}, quota)
	if errors.Is(err, store.ErrConflict) {
		return View{}, s.taken(ctx, owner, req, err)
	}
	if err != nil {
		return View{}, err
	}
	st, err := workflows.Create(ctx, s.Temporal, workflows.BoxWorkflowInput{
		BoxID: req.ID, Owner: owner, OwnerName: s.who(ctx, owner), Name: req.Name, Size: req.Size,
		Policy: policy, CreateWait: s.CreateWait,
	})
	if err != nil {
		s.dropUnstarted(ctx, req.ID)
		return View{}, err
	}
	s.audit(ctx, owner, req.ID, "create", map[string]any{"name": req.Name, "size": req.Size})
	s.keepPolicy(ctx, req.ID, st.Policy)
	return View{Status: st, Name: req.Name, Owner: owner, Size: req.Size, Role: cocoonbox.RoleOwner, CreatedAt: row.CreatedAt}, nil
}

// taken says which of a new box's ID and name another box holds. It looks only once the insert
// met one (err), so a create that takes neither costs no lookups.
func (s *Service) taken(ctx context.Context, owner string, req CreateRequest, err error) error {
	if existing, e := s.Store.BoxByID(ctx, req.ID); e == nil && existing.Owner != owner {
		return cocoonbox.Errorf(cocoonbox.EConflict, "box ID %s is taken", req.ID)
	}
	if existing, e := s.Store.BoxByOwnerName(ctx, owner, req.Name); e == nil && existing.ID != req.ID {
		return cocoonbox.Errorf(cocoonbox.EConflict, "name: you already have a box called %q", req.Name)
	}
	return &cocoonbox.Error{Code: cocoonbox.EConflict, Message: fmt.Sprintf("box ID %s or name %q is taken", req.ID, req.Name), Err: err}
}

// Get returns the box's status from its workflow (viewer).
func (s *Service) Get(ctx context.Context, caller string, id cocoonbox.BoxID) (View, error) {
	a, err := s.authorize(ctx, caller, id, cocoonbox.RoleViewer)
	if err != nil {
		return View{}, err
	}
	st, err := s.status(ctx, id)
	if err != nil {
		return View{}, err
	}
	v := view(a, st)
	if st.State.Transient() {
		v.Waiting = s.waiting(ctx, id)
	}
	return v, nil
}

// waiting is what the box's workflow is trying again, with the try it is on; "" when nothing
// is retried (or Temporal cannot say now).
func (s *Service) waiting(ctx context.Context, id cocoonbox.BoxID) string {
	failure, attempt := workflows.Retrying(ctx, s.Temporal, id)
	if failure == "" {
		return ""
	}
	return fmt.Sprintf("%s (try %d)", failure, attempt)
}

// List returns the caller's boxes and those shared with the caller, newest first, from their
// rows (the state the workflows last recorded), without asking every workflow.
func (s *Service) List(ctx context.Context, caller string) ([]View, error) {
	rows, err := s.Store.ListBoxesForUser(ctx, caller)
	if err != nil {
		return nil, fmt.Errorf("list boxes: %w", err)
	}
	out := make([]View, 0, len(rows))
	for _, r := range rows {
		out = append(out, View{
			Status: workflows.Status{BoxID: r.ID, State: r.State, SandboxID: r.SandboxID, LastError: r.Reason},
			Name:   r.Name, Owner: r.Owner, Size: r.Size, CreatedAt: r.CreatedAt, Role: r.Role,
			Parent: r.Parent, ForkedAt: r.ForkedAt,
		})
	}
	return out, nil
}

func (s *Service) status(ctx context.Context, id cocoonbox.BoxID) (workflows.Status, error) {
	var st workflows.Status
	err := s.revived(ctx, id, func() (err error) {
		st, err = workflows.GetStatus(ctx, s.Temporal, id)
		return err
	})
	return st, err
}

// dropUnstarted gives back the quota a failed create reserved, when its workflow never started
// (Temporal refused or was unreachable): otherwise the row would count against its owner with
// no workflow to delete it through. A box whose workflow exists is left to it. Best effort,
// logged.
func (s *Service) dropUnstarted(ctx context.Context, id cocoonbox.BoxID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if started, _ := workflows.Started(ctx, s.Temporal, id); started {
		return
	}
	if err := s.Store.DropUnstartedBox(ctx, id); err != nil && s.Logger != nil {
		s.Logger.Warn("drop reservation of unstarted box", "box", id, "err", err)
	}
}

// audit appends an event for a change a caller made; a failure is logged, not returned, because
// the change itself already happened.
func (s *Service) audit(ctx context.Context, actor string, id cocoonbox.BoxID, action string, detail map[string]any) {
	d, err := json.Marshal(detail)
	if err != nil {
		d = []byte("{}")
	}
	err = s.Store.AppendEvent(ctx, store.Event{Actor: actor, BoxID: string(id), Action: "box." + action, Detail: d})
	if err != nil && s.Logger != nil {
		s.Logger.Warn("audit event", "box", id, "action", action, "err", err)
	}
}

// later runs write beside the rest of the request, which does not wait for it: under ctx
// without its cancellation, bounded by a timeout instead.
func later(ctx context.Context, write func(context.Context)) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	go func() {
		defer cancel()
		write(ctx)
	}()
}

// errUnavailable is the answer when the service was built without a sandbox client.
var errUnavailable = errors.New("this server cannot reach boxes' sandboxes")
