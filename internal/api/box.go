package api

import (
	"context"
	"fmt"
	"time"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/nodes"
	"github.com/loomhand/cocoonbox/internal/store"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
	"github.com/loomhand/cocoonbox/workflows"
)

// boxService adapts BoxService to boxsvc, which checks every role; this layer only finds the
// caller, resolves the box and converts messages.
type boxService struct {
	cbv1.UnimplementedBoxServiceServer
	s *Server
}

// boxCaller returns the service layer and the caller's user ID.
func (s *Server) boxCaller(ctx context.Context) (*boxsvc.Service, string, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, "", err
	}
	if s.boxes == nil {
		return nil, "", cocoonbox.Errorf(cocoonbox.EUnavailable, "this server does not serve boxes")
	}
	return s.boxes, p.User.ID, nil
}

// resolveBox returns the service layer, the caller and the box a request's `box` field names.
func (s *Server) resolveBox(ctx context.Context, ref string) (*boxsvc.Service, string, cocoonbox.BoxID, error) {
	svc, caller, err := s.boxCaller(ctx)
	if err != nil {
		return nil, "", "", err
	}
	id, err := svc.Resolve(ctx, caller, ref)
	if err != nil {
		return nil, "", "", cocoonbox.RenameField(err, "box_id", "box")
	}
	return svc, caller, id, nil
}

// withRequest is ctx carrying the request's request_id, once checked, which makes a retried
// request the same operation (boxsvc.WithRequestID).
func withRequest(ctx context.Context, id string) (context.Context, error) {
	if id == "" {
		return ctx, nil
	}
	if err := boxsvc.ValidateRequestID("request_id", id); err != nil {
		return nil, err
	}
	return boxsvc.WithRequestID(ctx, id), nil
}

// CreateBox creates a box for the caller.
func (b *boxService) CreateBox(ctx context.Context, req *cbv1.CreateBoxRequest) (*cbv1.Box, error) {
	svc, caller, err := b.s.boxCaller(ctx)
	if err != nil {
		return nil, err
	}
	id := cocoonbox.BoxID(req.GetRequestId())
	if id != "" {
		if err := id.Validate(); err != nil {
			return nil, cocoonbox.RenameField(err, "box_id", "request_id")
		}
	}
	size := cocoonbox.Size(req.GetSize()) // empty: boxsvc applies cocoonbox.DefaultSize
	v, err := svc.Create(ctx, caller, boxsvc.CreateRequest{ID: id, Name: req.GetName(), Size: size,
		Network: cocoonbox.Network{Policy: req.GetNetwork(), Allow: req.GetNetworkAllow()}})
	if err != nil {
		return nil, err
	}
	return boxProto(v), nil
}

// GetBox returns the box's status.
func (b *boxService) GetBox(ctx context.Context, req *cbv1.GetBoxRequest) (*cbv1.Box, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	v, err := svc.Get(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	return boxProto(v), nil
}

// ListBoxes returns the caller's boxes and those shared with the caller.
func (b *boxService) ListBoxes(ctx context.Context, _ *cbv1.ListBoxesRequest) (*cbv1.ListBoxesResponse, error) {
	svc, caller, err := b.s.boxCaller(ctx)
	if err != nil {
		return nil, err
	}
	views, err := svc.List(ctx, caller)
	if err != nil {
		return nil, err
	}
	return &cbv1.ListBoxesResponse{Boxes: protoList(views, boxProto)}, nil
}

// DeleteBox ends the box (admin).
func (b *boxService) DeleteBox(ctx context.Context, req *cbv1.DeleteBoxRequest) (*cbv1.Box, error) {
	ctx, err := withRequest(ctx, req.GetRequestId())
	if err != nil {
		return nil, err
	}
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	v, err := svc.DeleteWith(ctx, caller, id, workflows.DeleteInput{PurgeSnapshots: req.GetPurgeSnapshots()})
	if err != nil {
		return nil, err
	}
	return boxProto(v), nil
}

// WakeBox brings a hibernated box back (driver).
func (b *boxService) WakeBox(ctx context.Context, req *cbv1.WakeBoxRequest) (*cbv1.Box, error) {
	ctx, err := withRequest(ctx, req.GetRequestId())
	if err != nil {
		return nil, err
	}
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	v, err := svc.Wake(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	return boxProto(v), nil
}

// HibernateBox puts the box to sleep (driver).
func (b *boxService) HibernateBox(ctx context.Context, req *cbv1.HibernateBoxRequest) (*cbv1.Box, error) {
	ctx, err := withRequest(ctx, req.GetRequestId())
	if err != nil {
		return nil, err
	}
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	v, err := svc.Hibernate(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	return boxProto(v), nil
}

// SnapshotBox snapshots the box's disk (driver).
func (b *boxService) SnapshotBox(ctx context.Context, req *cbv1.SnapshotBoxRequest) (*cbv1.Snapshot, error) {
	ctx, err := withRequest(ctx, req.GetRequestId())
	if err != nil {
		return nil, err
	}
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	res, err := svc.Snapshot(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	return snapshotProto(res.Snapshot), nil
}

// ListSnapshots returns the box's snapshots, newest first (viewer).
func (b *boxService) ListSnapshots(ctx context.Context, req *cbv1.ListSnapshotsRequest) (*cbv1.ListSnapshotsResponse, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	snaps, err := svc.ListSnapshots(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	return &cbv1.ListSnapshotsResponse{Snapshots: protoList(snaps, snapshotProto)}, nil
}

// RestoreBox replaces the box's state with a snapshot.
func (b *boxService) RestoreBox(ctx context.Context, req *cbv1.RestoreBoxRequest) (*cbv1.Box, error) {
	ctx, err := withRequest(ctx, req.GetRequestId())
	if err != nil {
		return nil, err
	}
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	v, err := svc.Restore(ctx, caller, id, req.GetSnapshotId())
	if err != nil {
		return nil, err
	}
	return boxProto(v), nil
}

// RecreateBox starts a lost box again from its template, empty.
func (b *boxService) RecreateBox(ctx context.Context, req *cbv1.RecreateBoxRequest) (*cbv1.Box, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	v, err := svc.Recreate(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	return boxProto(v), nil
}

// WatchBox streams the box's status until the client goes or the box is deleted (viewer).
func (b *boxService) WatchBox(req *cbv1.WatchBoxRequest, stream cbv1.BoxService_WatchBoxServer) error {
	ctx := stream.Context()
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return err
	}
	return svc.Watch(ctx, caller, id, func(v boxsvc.View) error {
		b := boxProto(v)
		b.Events = eventsProto(v.Events)
		return stream.Send(b)
	})
}

// Exec runs a command in the box (driver).
func (b *boxService) Exec(ctx context.Context, req *cbv1.ExecRequest) (*cbv1.ExecResponse, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	res, err := svc.Exec(ctx, caller, id, boxsvc.ExecRequest{
		Argv: req.GetArgv(), Cwd: req.GetCwd(), Env: req.GetEnv(), TimeoutSeconds: int(req.GetTimeoutSeconds()),
		Stdin: req.GetStdin(),
	})
	if err != nil {
		return nil, err
	}
	return &cbv1.ExecResponse{ExitCode: int32(res.ExitCode), Stdout: res.Stdout, Stderr: res.Stderr}, nil
}

// ReadFile returns a file from the box (driver).
func (b *boxService) ReadFile(ctx context.Context, req *cbv1.ReadFileRequest) (*cbv1.ReadFileResponse, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	content, mode, err := svc.ReadFile(ctx, caller, id, req.GetPath())
	if err != nil {
		return nil, err
	}
	return &cbv1.ReadFileResponse{Content: content, Mode: mode}, nil
}

// WriteFile writes a file into the box (driver).
func (b *boxService) WriteFile(ctx context.Context, req *cbv1.WriteFileRequest) (*cbv1.WriteFileResponse, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	n, err := svc.WriteFile(ctx, caller, id, req.GetPath(), req.GetContent(), req.GetMode())
	if err != nil {
		return nil, err
	}
	return &cbv1.WriteFileResponse{Bytes: n}, nil
}

// ShareBox gives a user a role on the box (admin).
func (b *boxService) ShareBox(ctx context.Context, req *cbv1.ShareBoxRequest) (*cbv1.Share, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	var expires *time.Time
	if req.ExpiresAt != nil {
		if err := req.GetExpiresAt().CheckValid(); err != nil {
			return nil, cocoonbox.Invalid("expires_at", fmt.Sprintf("is not a valid time: %v", err))
		}
		t := req.GetExpiresAt().AsTime()
		expires = &t
	}
	sh, err := svc.Share(ctx, caller, id, req.GetUser(), cocoonbox.Role(req.GetRole()), expires)
	if err != nil {
		return nil, err
	}
	return shareProto(sh), nil
}

// UnshareBox takes a user's share away (admin).
func (b *boxService) UnshareBox(ctx context.Context, req *cbv1.UnshareBoxRequest) (*cbv1.UnshareBoxResponse, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	if err := svc.Unshare(ctx, caller, id, req.GetUser()); err != nil {
		return nil, err
	}
	return &cbv1.UnshareBoxResponse{}, nil
}

// ListShares lists the box's shares (admin).
func (b *boxService) ListShares(ctx context.Context, req *cbv1.ListSharesRequest) (*cbv1.ListSharesResponse, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	shares, err := svc.ListShares(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	return &cbv1.ListSharesResponse{Shares: protoList(shares, shareProto)}, nil
}

// TakeOver gives the caller the desktop's control lease.
func (b *boxService) TakeOver(ctx context.Context, req *cbv1.TakeOverRequest) (*cbv1.Box, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	v, err := svc.TakeOver(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	return boxProto(v), nil
}

// HandBack ends the caller's control lease.
func (b *boxService) HandBack(ctx context.Context, req *cbv1.HandBackRequest) (*cbv1.Box, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	v, err := svc.HandBack(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	return boxProto(v), nil
}

// DesktopTicket returns a ticket that opens the box's desktop at the edge once, within a minute:
// view needs viewer; control needs driver and the control lease (TakeOver first).
func (b *boxService) DesktopTicket(ctx context.Context, req *cbv1.DesktopTicketRequest) (*cbv1.DesktopTicketResponse, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	mode := modeView
	switch {
	case btoi(req.GetTerminal())+btoi(req.GetControl())+btoi(req.GetPreviewPort() != 0) > 1:
		return nil, cocoonbox.Invalid("terminal", "ask for one ticket at a time: control, terminal or preview_port")
	case req.GetTerminal():
		mode = modeTerminal
	case req.GetControl():
		mode = modeControl
	case req.GetPreviewPort() != 0:
		mode = modePreview
		if err := boxsvc.CheckPort(int(req.GetPreviewPort())); err != nil {
			return nil, cocoonbox.RenameField(err, "port", "preview_port")
		}
		if b.s.previewDomain == "" {
			return nil, cocoonbox.Errorf(cocoonbox.EConflict, "this API has no preview domain (config preview_domain): open the port with box port instead")
		}
	}
	switch mode {
	case modePreview:
		if err := allowScope(p.Token.Scope, routePorts); err != nil {
			return nil, err
		}
	case modeTerminal, modeControl:
		if err := allowScope(p.Token.Scope, routeDesktop+mode); err != nil {
			return nil, err
		}
	}
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	switch mode {
	case modeTerminal:
		err = svc.CheckShell(ctx, caller, id)
	case modePreview:
		_, err = svc.Authorize(ctx, caller, id, cocoonbox.RoleViewer)
	default:
		err = svc.CheckDesktop(ctx, caller, id, req.GetControl())
	}
	if err != nil {
		return nil, err
	}
	keys, err := b.s.ticketKeys()
	if err != nil {
		return nil, err
	}
	t, err := newTicket(id, caller, p.Token.ID, mode, time.Now())
	if err != nil {
		return nil, err
	}
	t.Port = int(req.GetPreviewPort())
	sealed, err := sealTicket(keys, t)
	if err != nil {
		return nil, err
	}
	url := desktopPath(id, t.Mode, sealed)
	if mode == modePreview {
		url = "//" + previewHostName(id, t.Port, b.s.previewDomain) + "/?" + previewTicketParam + "=" + sealed
	}
	return &cbv1.DesktopTicketResponse{Ticket: sealed, ExpiresAt: ts(t.Expires), Url: url}, nil
}

// btoi is 1 for true.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// SetPolicy changes the fields of the box's policy the request sets.
func (b *boxService) SetPolicy(ctx context.Context, req *cbv1.SetPolicyRequest) (*cbv1.Box, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	c := policyChange(req.IdleSeconds, req.Durable, req.KeepSnapshots, req.SnapshotEverySeconds, req.LeaseIdleSeconds, req.RecordRuns)
	v, err := svc.ChangePolicy(ctx, caller, id, c)
	if err != nil {
		return nil, err
	}
	return boxProto(v), nil
}

// ListEvents returns what happened to the box, oldest first.
func (b *boxService) ListEvents(ctx context.Context, req *cbv1.ListEventsRequest) (*cbv1.ListEventsResponse, error) {
	svc, caller, id, err := b.s.resolveBox(ctx, req.GetBox())
	if err != nil {
		return nil, err
	}
	events, err := svc.ListEvents(ctx, caller, id, req.GetAfterId(), int(req.GetLimit()))
	if err != nil {
		return nil, err
	}
	return &cbv1.ListEventsResponse{Events: eventsProto(events)}, nil
}

// ListPools shows the engine's warm pools (operators).
func (b *boxService) ListPools(ctx context.Context, _ *cbv1.ListPoolsRequest) (*cbv1.ListPoolsResponse, error) {
	if err := mustOperator(ctx, "ListPools"); err != nil {
		return nil, err
	}
	pools, err := b.s.boxes.Pools(ctx)
	if err != nil {
		return nil, err
	}
	return poolsProto(pools), nil
}

// SetPools replaces the engine's warm pools (operators).
func (b *boxService) SetPools(ctx context.Context, req *cbv1.SetPoolsRequest) (*cbv1.ListPoolsResponse, error) {
	if err := mustOperator(ctx, "SetPools"); err != nil {
		return nil, err
	}
	specs := make([]boxsvc.Pool, 0, len(req.GetPools()))
	for _, p := range req.GetPools() {
		specs = append(specs, boxsvc.Pool{Template: p.GetTemplate(), Size: p.GetSize(), Net: p.GetNet(), Target: int(p.GetTarget())})
	}
	pools, err := b.s.boxes.SetPools(ctx, specs)
	if err != nil {
		return nil, err
	}
	p, _ := PrincipalFrom(ctx)
	b.s.audit(ctx, p.User.ID, "pools.set", map[string]any{"pools": specs})
	return poolsProto(pools), nil
}

// mustOperator refuses a caller who is not an admin user.
func mustOperator(ctx context.Context, method string) error {
	_, err := mustAdmin(ctx, method+" is for operators: use an admin user's token")
	return err
}

func poolsProto(pools []boxsvc.Pool) *cbv1.ListPoolsResponse {
	out := &cbv1.ListPoolsResponse{}
	for _, p := range pools {
		out.Pools = append(out.Pools, &cbv1.WarmPool{Template: p.Template, Size: p.Size, Net: p.Net,
			Target: int32(p.Target), Ready: int32(p.Ready), Starting: int32(p.Starting)})
	}
	return out
}

// policyChange is a request's optional policy fields as a change.
func policyChange(idle *int64, durable *bool, keep *int32, every, leaseIdle *int64, record *bool) boxsvc.PolicyChange {
	c := boxsvc.PolicyChange{IdleSeconds: idle, Durable: durable, SnapshotEverySeconds: every, LeaseIdleSeconds: leaseIdle, RecordRuns: record}
	if keep != nil {
		n := int(*keep)
		c.KeepSnapshots = &n
	}
	return c
}

// GetPolicyDefaults is the policy a new box of the caller gets.
func (b *boxService) GetPolicyDefaults(ctx context.Context, _ *cbv1.GetPolicyDefaultsRequest) (*cbv1.BoxPolicy, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	pol, err := b.s.boxes.PolicyDefaults(ctx, p.User.ID)
	if err != nil {
		return nil, err
	}
	return policyProto(pol), nil
}

// SetPolicyDefaults changes the caller's defaults for new boxes.
func (b *boxService) SetPolicyDefaults(ctx context.Context, req *cbv1.SetPolicyDefaultsRequest) (*cbv1.BoxPolicy, error) {
	p, err := mustPrincipal(ctx)
	if err != nil {
		return nil, err
	}
	c := policyChange(req.IdleSeconds, req.Durable, req.KeepSnapshots, req.SnapshotEverySeconds, req.LeaseIdleSeconds, req.RecordRuns)
	pol, err := b.s.boxes.SetPolicyDefaults(ctx, p.User.ID, c)
	if err != nil {
		return nil, err
	}
	b.s.audit(ctx, p.User.ID, "policy.defaults", map[string]any{"change": c})
	return policyProto(pol), nil
}

func eventsProto(events []store.Event) []*cbv1.BoxEvent {
	var out []*cbv1.BoxEvent
	for _, e := range events {
		out = append(out, &cbv1.BoxEvent{Id: e.ID, Actor: e.Actor, Action: e.Action, Detail: string(e.Detail), At: ts(e.At)})
	}
	return out
}

// ListNodes lists the engine nodes as their workers last reported them (operators).
func (b *boxService) ListNodes(ctx context.Context, _ *cbv1.ListNodesRequest) (*cbv1.ListNodesResponse, error) {
	if err := mustOperator(ctx, "ListNodes"); err != nil {
		return nil, err
	}
	if b.s.store == nil {
		return nil, cocoonbox.Errorf(cocoonbox.EUnavailable, "this server has no database")
	}
	list, err := b.s.store.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	return &cbv1.ListNodesResponse{Nodes: protoList(list, nodeProto)}, nil
}

// DrainNode marks an engine node draining, or active again with undo (operators).
func (b *boxService) DrainNode(ctx context.Context, req *cbv1.DrainNodeRequest) (*cbv1.Node, error) {
	if err := mustOperator(ctx, "DrainNode"); err != nil {
		return nil, err
	}
	if req.GetNode() == "" {
		return nil, cocoonbox.Invalid("node", "is required: the ID `cocoonbox admin nodes` lists")
	}
	if p := req.GetParallel(); p < 0 || p > workflows.MaxDrainParallel {
		return nil, cocoonbox.Invalid("parallel", fmt.Sprintf("must be 1 to %d boxes moved at once (0 means 1), got %d", workflows.MaxDrainParallel, p))
	}
	if b.s.store == nil {
		return nil, cocoonbox.Errorf(cocoonbox.EUnavailable, "this server has no database")
	}
	n, err := b.s.store.SetNodeDraining(ctx, req.GetNode(), !req.GetUndo())
	if err != nil {
		return nil, err
	}
	if b.s.boxes == nil {
		return nodeProto(n), nil
	}
	c := b.s.boxes.Temporal
	if req.GetUndo() {
		return nodeProto(n), workflows.StopDrain(ctx, c, n.ID)
	}
	// The boxes on it are moved off by a workflow of the drain's own: running ones now,
	// sleeping ones on their next wake. Draining again starts it again.
	if err := workflows.StartDrain(ctx, c, n.ID, int(req.GetParallel())); err != nil {
		return nil, err
	}
	if !req.GetWait() {
		return nodeProto(n), nil
	}
	res, err := workflows.DrainOutcome(ctx, c, n.ID)
	if err != nil {
		return nil, err
	}
	out := nodeProto(n)
	out.Drain = &cbv1.NodeDrain{Moved: boxIDs(res.Moved), OnWake: boxIDs(res.OnWake)}
	for _, f := range res.Failed {
		out.Drain.Failed = append(out.Drain.Failed, &cbv1.DrainFailure{Box: string(f.Box), Reason: f.Reason})
	}
	return out, nil
}

func boxIDs(ids []cocoonbox.BoxID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
}

func nodeProto(n nodes.Node) *cbv1.Node {
	warm := map[string]int32{}
	for k, v := range n.Warm {
		warm[k] = int32(v)
	}
	return &cbv1.Node{Id: n.ID, Url: n.URL, State: string(n.State), MemoryMib: n.MemoryMiB, CommittedMib: n.CommittedMiB,
		MaxBoxes: int32(n.MaxBoxes), Boxes: int32(n.Boxes), Hibernated: int32(n.Hibernated), Warm: warm, HeartbeatAt: ts(n.HeartbeatAt)}
}
