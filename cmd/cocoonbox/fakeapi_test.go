package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loomhand/cocoonbox/internal/api"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// fakeToken is the only bearer token fakeAPI accepts.
const fakeToken = "cbx_test"

// t0 is when everything in the fake happened.
var t0 = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

// fakeAPI is a small in-memory API server: it keeps boxes and files, answers with canned data,
// records the last request of each method and checks the bearer token like the real one.
type fakeAPI struct {
	cbv1.UnimplementedBoxServiceServer
	cbv1.UnimplementedAccountServiceServer
	cbv1.UnimplementedVaultServiceServer

	agent *fakeAgent

	mu    sync.Mutex
	boxes []*cbv1.Box
	files map[string]*cbv1.WriteFileRequest // box/path → last write
	reqs  map[string]proto.Message          // method name → last request
	pools []*cbv1.WarmPool                  // the engine's, as SetPools left them
	// streams turns on StatFile and UploadFile (a server with streamed files but, being gRPC
	// only, no files route).
	streams bool
	// flaky is the request ID of every send of a snapshot of box "flaky", whose first two sends
	// fail as a call does when the API dies under it.
	flaky []string
}

// startFake serves a fakeAPI on 127.0.0.1:0 and returns it with its endpoint URL.
func startFake(t *testing.T) (*fakeAPI, string) {
	t.Helper()
	f := &fakeAPI{files: map[string]*cbv1.WriteFileRequest{}, reqs: map[string]proto.Message{}}
	f.boxes = sampleBoxes()
	f.agent = &fakeAgent{f: f, watching: make(chan struct{}, 1)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(f.auth), grpc.StreamInterceptor(f.streamAuth))
	cbv1.RegisterBoxServiceServer(srv, f)
	cbv1.RegisterAccountServiceServer(srv, f)
	cbv1.RegisterVaultServiceServer(srv, f)
	cbv1.RegisterAgentServiceServer(srv, f.agent)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return f, "http://" + lis.Addr().String()
}

func (f *fakeAPI) auth(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer "+fakeToken {
		return nil, status.Error(codes.Unauthenticated, "invalid or revoked token")
	}
	f.mu.Lock()
	f.reqs[info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]] = req.(proto.Message)
	f.mu.Unlock()
	return h(ctx, req)
}

// last returns the last request of method.
func (f *fakeAPI) last(method string) proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reqs[method]
}

func sampleBoxes() []*cbv1.Box {
	return []*cbv1.Box{
		{Id: "bx_00000000000000a1", Name: "web", Owner: "us_ann", Size: "small", State: "running", Role: "owner",
			Viewers: 1, Pins: []string{"run_7"}, IdleDeadline: timestamppb.New(t0.Add(30 * time.Minute)),
			LastSnapshot: "sn_0002", CreatedAt: timestamppb.New(t0), Network: "allow", NetworkAllow: []string{"198.18.0.0/15:443"},
			Policy: &cbv1.BoxPolicy{IdleSeconds: 900, KeepSnapshots: 5, Durable: true, SnapshotEverySeconds: 1800}},
		{Id: "bx_00000000000000b2", Name: "build-farm", Owner: "us_bob", Size: "xlarge", State: "hibernated", Role: "driver",
			LastError: "wake: no capacity", CreatedAt: timestamppb.New(t0.Add(-48 * time.Hour)), Seal: "sealed",
			RestoredFrom: &cbv1.RestoredFrom{SnapshotId: "sn_0009", TakenAt: timestamppb.New(t0.Add(-50 * time.Hour)), At: timestamppb.New(t0.Add(-49 * time.Hour))}},
	}
}

// sampleForks are a box, two forks of it, a fork of a fork, and a fork whose parent is gone.
func sampleForks() []*cbv1.Box {
	fork := func(id, name, parent string, at time.Duration) *cbv1.Box {
		return &cbv1.Box{Id: id, Name: name, Owner: "us_ann", Size: "medium", State: "running", Role: "owner",
			CreatedAt: timestamppb.New(t0.Add(at)), Parent: parent, ForkedAt: timestamppb.New(t0.Add(at))}
	}
	return []*cbv1.Box{
		fork("bx_00000000000000d4", "desk-fork-1-fork-1", "bx_00000000000000b2", 3*time.Minute),
		fork("bx_00000000000000c3", "desk-fork-2", "bx_00000000000000a1", 2*time.Minute),
		fork("bx_00000000000000b2", "desk-fork-1", "bx_00000000000000a1", time.Minute),
		fork("bx_00000000000000e5", "old-fork-1", "bx_00000000000000ff", -time.Hour),
		{Id: "bx_00000000000000a1", Name: "desk", Owner: "us_ann", Size: "medium", State: "running", Role: "owner", CreatedAt: timestamppb.New(t0)},
	}
}

func sampleSnapshots() []*cbv1.Snapshot {
	return []*cbv1.Snapshot{
		{Id: "sn_0002", BoxId: "bx_00000000000000a1", ParentId: "sn_0001", BaseId: "sn_0001", Depth: 1, State: "complete", Bytes: 734003200, Sha256: "ab12", Files: 48211, CreatedAt: timestamppb.New(t0.Add(-time.Hour))},
		{Id: "sn_0001", BoxId: "bx_00000000000000a1", State: "complete", Bytes: 1536, Files: 12, Pinned: true, CreatedAt: timestamppb.New(t0.Add(-24 * time.Hour))},
	}
}

func sampleShares() []*cbv1.Share {
	return []*cbv1.Share{
		{BoxId: "bx_00000000000000a1", UserId: "us_bob", UserName: "bob", Role: "driver", CreatedAt: timestamppb.New(t0)},
		{BoxId: "bx_00000000000000a1", UserId: "us_carol", UserName: "carol", Role: "viewer", ExpiresAt: timestamppb.New(t0.Add(24 * time.Hour)), CreatedAt: timestamppb.New(t0)},
	}
}

func sampleTokens() []*cbv1.Token {
	return []*cbv1.Token{
		{Id: "tk_1", Name: "laptop", CreatedAt: timestamppb.New(t0.Add(-72 * time.Hour)), LastUsedAt: timestamppb.New(t0)},
		{Id: "tk_2", Name: "ci", CreatedAt: timestamppb.New(t0.Add(-72 * time.Hour)), ExpiresAt: timestamppb.New(t0.Add(-time.Hour))},
		{Id: "tk_3", Name: "old", CreatedAt: timestamppb.New(t0.Add(-72 * time.Hour)), RevokedAt: timestamppb.New(t0.Add(-2 * time.Hour))},
	}
}

func (f *fakeAPI) find(box string) (*cbv1.Box, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.boxes {
		if b.GetId() == box || b.GetName() == box {
			return proto.Clone(b).(*cbv1.Box), nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "box %q not found", box)
}

func (f *fakeAPI) CreateBox(_ context.Context, r *cbv1.CreateBoxRequest) (*cbv1.Box, error) {
	if r.GetName() == "" || strings.ToLower(r.GetName()) != r.GetName() {
		return nil, status.Errorf(codes.InvalidArgument, "name: want a lowercase letter, then lowercase letters, digits, dots, underscores or hyphens; got %q", r.GetName())
	}
	if _, err := f.find(r.GetName()); err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "box %q already exists", r.GetName())
	}
	if r.GetName() == "stuck" { // an engine that cannot hand out a sandbox, until the create gives up
		time.Sleep(300 * time.Millisecond)
		return nil, status.Error(codes.FailedPrecondition, "claim sandbox: template \"desktop\" is not available on this engine now: its image is not built (the operator runs make image)")
	}
	return &cbv1.Box{Id: "bx_00000000000000c3", Name: r.GetName(), Size: r.GetSize(), State: "running", Role: "owner", CreatedAt: timestamppb.New(t0)}, nil
}

func (f *fakeAPI) GetBox(_ context.Context, r *cbv1.GetBoxRequest) (*cbv1.Box, error) {
	if r.GetBox() == "stuck" {
		return &cbv1.Box{Id: "bx_00000000000000d4", Name: "stuck", State: "creating",
			Waiting: `claim sandbox: template "desktop" is not available on this engine now: its image is not built (the operator runs make image) (try 2)`}, nil
	}
	return f.find(r.GetBox())
}

func (f *fakeAPI) ListBoxes(context.Context, *cbv1.ListBoxesRequest) (*cbv1.ListBoxesResponse, error) {
	return &cbv1.ListBoxesResponse{Boxes: sampleBoxes()}, nil
}

func (f *fakeAPI) DeleteBox(_ context.Context, r *cbv1.DeleteBoxRequest) (*cbv1.Box, error) {
	b, err := f.find(r.GetBox())
	if err != nil {
		return nil, err
	}
	b.State = "deleted"
	return b, nil
}

func (f *fakeAPI) WakeBox(_ context.Context, r *cbv1.WakeBoxRequest) (*cbv1.Box, error) {
	b, err := f.find(r.GetBox())
	if err != nil {
		return nil, err
	}
	if b.GetState() == "hibernated" {
		return nil, dependencyDown("no capacity: try again later")
	}
	return b, nil
}

// setController gives box's control lease to user ("" ends it) and returns the box after.
func (f *fakeAPI) setController(box, user string) (*cbv1.Box, error) {
	if _, err := f.find(box); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.boxes {
		if b.GetId() == box || b.GetName() == box {
			b.Controller = user
			return proto.Clone(b).(*cbv1.Box), nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "box %q not found", box)
}

// TakeOver gives the lease to the token's user, us_ann.
func (f *fakeAPI) TakeOver(_ context.Context, r *cbv1.TakeOverRequest) (*cbv1.Box, error) {
	return f.setController(r.GetBox(), "us_ann")
}

func (f *fakeAPI) HandBack(_ context.Context, r *cbv1.HandBackRequest) (*cbv1.Box, error) {
	return f.setController(r.GetBox(), "")
}

func (f *fakeAPI) HibernateBox(_ context.Context, r *cbv1.HibernateBoxRequest) (*cbv1.Box, error) {
	b, err := f.find(r.GetBox())
	if err != nil {
		return nil, err
	}
	if b.GetState() != "running" {
		return nil, status.Errorf(codes.FailedPrecondition, "box %s is %s", b.GetName(), b.GetState())
	}
	b.State = "hibernated"
	return b, nil
}

func (f *fakeAPI) SnapshotBox(ctx context.Context, r *cbv1.SnapshotBoxRequest) (*cbv1.Snapshot, error) {
	if r.GetBox() == "stuck" { // a snapshot that never ends: the caller's deadline must
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if r.GetBox() == "flaky" {
		f.mu.Lock()
		f.flaky = append(f.flaky, r.GetRequestId())
		n := len(f.flaky)
		f.mu.Unlock()
		if n <= 2 {
			return nil, status.Error(codes.Unavailable, "error reading from server: EOF")
		}
		return sampleSnapshots()[0], nil
	}
	if _, err := f.find(r.GetBox()); err != nil {
		return nil, err
	}
	return sampleSnapshots()[0], nil
}

func (f *fakeAPI) ListSnapshots(_ context.Context, r *cbv1.ListSnapshotsRequest) (*cbv1.ListSnapshotsResponse, error) {
	if _, err := f.find(r.GetBox()); err != nil {
		return nil, err
	}
	return &cbv1.ListSnapshotsResponse{Snapshots: sampleSnapshots()}, nil
}

func (f *fakeAPI) ListPools(context.Context, *cbv1.ListPoolsRequest) (*cbv1.ListPoolsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pools == nil {
		f.pools = []*cbv1.WarmPool{{Template: "desktop", Size: "small", Net: "none", Target: 2, Ready: 1, Starting: 1}}
	}
	return &cbv1.ListPoolsResponse{Pools: f.pools}, nil
}

func (f *fakeAPI) SetPools(_ context.Context, r *cbv1.SetPoolsRequest) (*cbv1.ListPoolsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pools = r.GetPools()
	return &cbv1.ListPoolsResponse{Pools: f.pools}, nil
}

func (f *fakeAPI) RecreateBox(_ context.Context, r *cbv1.RecreateBoxRequest) (*cbv1.Box, error) {
	return f.find(r.GetBox())
}

func (f *fakeAPI) RestoreBox(_ context.Context, r *cbv1.RestoreBoxRequest) (*cbv1.Box, error) {
	return f.find(r.GetBox())
}

// Exec understands `exit N` and `echo WORDS...`; anything else prints its argv.
func (f *fakeAPI) Exec(_ context.Context, r *cbv1.ExecRequest) (*cbv1.ExecResponse, error) {
	if _, err := f.find(r.GetBox()); err != nil {
		return nil, err
	}
	argv := r.GetArgv()
	if len(argv) == 0 {
		return nil, status.Error(codes.InvalidArgument, "argv: must not be empty")
	}
	switch argv[0] {
	case "exit":
		var code int32
		fmt.Sscan(argv[1], &code)
		return &cbv1.ExecResponse{ExitCode: code, Stdout: "out\n", Stderr: "err\n"}, nil
	case "echo":
		return &cbv1.ExecResponse{Stdout: strings.Join(argv[1:], " ") + "\n"}, nil
	}
	return &cbv1.ExecResponse{Stdout: fmt.Sprintf("%q\n", argv)}, nil
}

func (f *fakeAPI) WriteFile(_ context.Context, r *cbv1.WriteFileRequest) (*cbv1.WriteFileResponse, error) {
	b, err := f.find(r.GetBox())
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.files[b.GetId()+r.GetPath()] = r
	f.mu.Unlock()
	return &cbv1.WriteFileResponse{Bytes: int64(len(r.GetContent()))}, nil
}

func (f *fakeAPI) StatFile(_ context.Context, r *cbv1.StatFileRequest) (*cbv1.FileInfo, error) {
	if !f.streams {
		return nil, status.Error(codes.Unimplemented, "method StatFile not implemented")
	}
	b, err := f.find(r.GetBox())
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	w, ok := f.files[b.GetId()+r.GetPath()]
	f.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "path: %s: no such file or directory", r.GetPath())
	}
	return &cbv1.FileInfo{Path: r.GetPath(), Type: "file", Size: int64(len(w.GetContent())), Mode: w.GetMode()}, nil
}

// UploadFile keeps the streamed file as a WriteFile of its whole content.
func (f *fakeAPI) UploadFile(stream cbv1.BoxService_UploadFileServer) error {
	if !f.streams {
		return status.Error(codes.Unimplemented, "method UploadFile not implemented")
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	b, err := f.find(first.GetBox())
	if err != nil {
		return err
	}
	w := &cbv1.WriteFileRequest{Box: first.GetBox(), Path: first.GetPath(), Mode: first.GetMode(), Content: first.GetData()}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return err
		}
		w.Content = append(w.Content, msg.GetData()...)
	}
	if first.GetSize() >= 0 && int64(len(w.Content)) != first.GetSize() {
		return status.Errorf(codes.InvalidArgument, "size: the stream carried %d of %d bytes", len(w.Content), first.GetSize())
	}
	f.mu.Lock()
	f.files[b.GetId()+w.GetPath()] = w
	f.reqs["UploadFile"] = w
	f.mu.Unlock()
	return stream.SendAndClose(&cbv1.FileInfo{Path: w.GetPath(), Type: "file", Size: int64(len(w.Content)), Mode: w.GetMode()})
}

func (f *fakeAPI) ReadFile(_ context.Context, r *cbv1.ReadFileRequest) (*cbv1.ReadFileResponse, error) {
	b, err := f.find(r.GetBox())
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	w, ok := f.files[b.GetId()+r.GetPath()]
	f.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "path: %s: no such file", r.GetPath())
	}
	return &cbv1.ReadFileResponse{Content: w.GetContent(), Mode: w.GetMode()}, nil
}

func (f *fakeAPI) ShareBox(_ context.Context, r *cbv1.ShareBoxRequest) (*cbv1.Share, error) {
	b, err := f.find(r.GetBox())
	if err != nil {
		return nil, err
	}
	switch r.GetRole() {
	case "viewer", "driver", "admin":
	default:
		return nil, status.Errorf(codes.InvalidArgument, "role: want viewer, driver or admin, got %q", r.GetRole())
	}
	return &cbv1.Share{BoxId: b.GetId(), UserId: "us_" + r.GetUser(), UserName: r.GetUser(), Role: r.GetRole(), ExpiresAt: r.GetExpiresAt(), CreatedAt: timestamppb.New(t0)}, nil
}

func (f *fakeAPI) UnshareBox(_ context.Context, r *cbv1.UnshareBoxRequest) (*cbv1.UnshareBoxResponse, error) {
	if _, err := f.find(r.GetBox()); err != nil {
		return nil, err
	}
	return &cbv1.UnshareBoxResponse{}, nil
}

func (f *fakeAPI) SetBoxNetwork(_ context.Context, r *cbv1.SetBoxNetworkRequest) (*cbv1.Box, error) {
	b, err := f.find(r.GetBox())
	if err != nil {
		return nil, err
	}
	b = proto.Clone(b).(*cbv1.Box)
	b.Network, b.NetworkAllow = r.GetNetwork(), r.GetNetworkAllow()
	return b, nil
}

func (f *fakeAPI) ListPorts(_ context.Context, r *cbv1.ListPortsRequest) (*cbv1.ListPortsResponse, error) {
	b, err := f.find(r.GetBox())
	if err != nil {
		return nil, err
	}
	if b.GetState() != "running" {
		return &cbv1.ListPortsResponse{}, nil
	}
	return &cbv1.ListPortsResponse{Ports: []*cbv1.Port{{Port: 8000, PreviewPath: "/v1/boxes/" + b.GetId() + "/ports/8000/", TunnelPath: "/v1/boxes/" + b.GetId() + "/ports/8000"}}}, nil
}

func (f *fakeAPI) ListShares(_ context.Context, r *cbv1.ListSharesRequest) (*cbv1.ListSharesResponse, error) {
	b, err := f.find(r.GetBox())
	if err != nil {
		return nil, err
	}
	if b.GetRole() != "owner" && b.GetRole() != "admin" {
		return nil, status.Error(codes.PermissionDenied, "listing shares needs the admin role")
	}
	return &cbv1.ListSharesResponse{Shares: sampleShares()}, nil
}

func (f *fakeAPI) WhoAmI(context.Context, *cbv1.WhoAmIRequest) (*cbv1.WhoAmIResponse, error) {
	return &cbv1.WhoAmIResponse{User: &cbv1.User{Id: "us_ann", Name: "ann", CreatedAt: timestamppb.New(t0)}, TokenName: "laptop"}, nil
}

func (f *fakeAPI) CreateToken(_ context.Context, r *cbv1.CreateTokenRequest) (*cbv1.CreateTokenResponse, error) {
	tok := &cbv1.Token{Id: "tk_9", Name: r.GetName(), CreatedAt: timestamppb.New(t0)}
	if r.GetTtlSeconds() > 0 {
		tok.ExpiresAt = timestamppb.New(t0.Add(time.Duration(r.GetTtlSeconds()) * time.Second))
	}
	return &cbv1.CreateTokenResponse{Token: tok, Secret: "cbx_newsecret"}, nil
}

func (f *fakeAPI) ListTokens(context.Context, *cbv1.ListTokensRequest) (*cbv1.ListTokensResponse, error) {
	return &cbv1.ListTokensResponse{Tokens: sampleTokens()}, nil
}

func (f *fakeAPI) RevokeToken(_ context.Context, r *cbv1.RevokeTokenRequest) (*cbv1.RevokeTokenResponse, error) {
	if r.GetId() != "tk_1" {
		return nil, status.Errorf(codes.NotFound, "token %q not found", r.GetId())
	}
	return &cbv1.RevokeTokenResponse{}, nil
}

func (f *fakeAPI) CreateUser(_ context.Context, r *cbv1.CreateUserRequest) (*cbv1.CreateUserResponse, error) {
	return &cbv1.CreateUserResponse{User: &cbv1.User{Id: "us_eve", Name: r.GetName(), Admin: r.GetAdmin(), CreatedAt: timestamppb.New(t0)}, Secret: "cbx_evesecret"}, nil
}

func (f *fakeAPI) ListUsers(context.Context, *cbv1.ListUsersRequest) (*cbv1.ListUsersResponse, error) {
	return &cbv1.ListUsersResponse{Users: sampleUsers()}, nil
}

func (f *fakeAPI) DisableUser(_ context.Context, r *cbv1.DisableUserRequest) (*cbv1.DisableUserResponse, error) {
	if r.GetUser() != "bob" {
		return nil, status.Errorf(codes.NotFound, "user: no user is called or has the ID %q", r.GetUser())
	}
	return &cbv1.DisableUserResponse{User: sampleUsers()[1], TokensRevoked: 2, RunsCancelled: 1}, nil
}

func (f *fakeAPI) ListNodes(context.Context, *cbv1.ListNodesRequest) (*cbv1.ListNodesResponse, error) {
	return &cbv1.ListNodesResponse{Nodes: sampleNodes()}, nil
}

func (f *fakeAPI) DrainNode(_ context.Context, r *cbv1.DrainNodeRequest) (*cbv1.Node, error) {
	n := sampleNodes()[0]
	if r.GetNode() != n.GetId() {
		return nil, status.Errorf(codes.NotFound, "node %s: not found", r.GetNode())
	}
	n.State = "draining"
	if r.GetUndo() {
		n.State = "active"
	}
	if r.GetWait() {
		n.Drain = &cbv1.NodeDrain{Moved: []string{"bx_0000000000000001", "bx_0000000000000002"}, OnWake: []string{"bx_0000000000000003"},
			Failed: []*cbv1.DrainFailure{{Box: "bx_0000000000000004", Reason: "no_capacity: no node has room for a small box"}}}
	}
	return n, nil
}

// sampleNodes are a busy node with warm pools, a node of upstream sandboxd (no capacity) and a
// lost one.
func sampleNodes() []*cbv1.Node {
	return []*cbv1.Node{
		{Id: "node-a", Url: "http://10.0.0.1:7777", State: "active", MemoryMib: 22528, CommittedMib: 3072, MaxBoxes: 64, Boxes: 5, Hibernated: 2,
			Warm: map[string]int32{"desktop/medium/none": 2, "base/small/none": 1}, HeartbeatAt: timestamppb.New(t0.Add(-4 * time.Second))},
		{Id: "node-b", Url: "http://10.0.0.2:7777", State: "active", Boxes: 1, HeartbeatAt: timestamppb.New(t0.Add(-9 * time.Second))},
		{Id: "node-c", Url: "http://10.0.0.3:7777", State: "lost", MemoryMib: 22528, MaxBoxes: 64, Boxes: 3, HeartbeatAt: timestamppb.New(t0.Add(-5 * time.Minute))},
	}
}

// sampleUsers are an admin, a disabled user and a user.
func sampleUsers() []*cbv1.User {
	return []*cbv1.User{
		{Id: "us_ann", Name: "ann", Admin: true, CreatedAt: timestamppb.New(t0)},
		{Id: "us_bob", Name: "bob", CreatedAt: timestamppb.New(t0), DisabledAt: timestamppb.New(t0.Add(time.Hour))},
		{Id: "us_cy", Name: "cy", CreatedAt: timestamppb.New(t0.Add(time.Minute))},
	}
}

func (f *fakeAPI) SetSecret(_ context.Context, r *cbv1.SetSecretRequest) (*cbv1.Secret, error) {
	return &cbv1.Secret{Name: r.GetName(), CreatedAt: timestamppb.New(t0), UpdatedAt: timestamppb.New(t0)}, nil
}

func (f *fakeAPI) ListSecrets(context.Context, *cbv1.ListSecretsRequest) (*cbv1.ListSecretsResponse, error) {
	return &cbv1.ListSecretsResponse{Secrets: []*cbv1.Secret{{Name: "OPENAI_API_KEY", CreatedAt: timestamppb.New(t0), UpdatedAt: timestamppb.New(t0)}}}, nil
}

func (f *fakeAPI) DeleteSecret(context.Context, *cbv1.DeleteSecretRequest) (*cbv1.DeleteSecretResponse, error) {
	return &cbv1.DeleteSecretResponse{}, nil
}

func (f *fakeAPI) SetPolicy(_ context.Context, r *cbv1.SetPolicyRequest) (*cbv1.Box, error) {
	b, err := f.find(r.GetBox())
	if err != nil {
		return nil, err
	}
	b = proto.Clone(b).(*cbv1.Box)
	if b.Policy == nil {
		b.Policy = &cbv1.BoxPolicy{}
	}
	if r.IdleSeconds != nil {
		b.Policy.IdleSeconds = r.GetIdleSeconds()
	}
	if r.Durable != nil {
		b.Policy.Durable = r.GetDurable()
	}
	if r.KeepSnapshots != nil {
		b.Policy.KeepSnapshots = r.GetKeepSnapshots()
	}
	if r.SnapshotEverySeconds != nil {
		b.Policy.SnapshotEverySeconds = r.GetSnapshotEverySeconds()
	}
	if r.LeaseIdleSeconds != nil {
		b.Policy.LeaseIdleSeconds = r.GetLeaseIdleSeconds()
	}
	return b, nil
}

func (f *fakeAPI) GetPolicyDefaults(context.Context, *cbv1.GetPolicyDefaultsRequest) (*cbv1.BoxPolicy, error) {
	return &cbv1.BoxPolicy{IdleSeconds: 900, Durable: true, SnapshotEverySeconds: 1800, KeepSnapshots: 5, LeaseIdleSeconds: 120}, nil
}

func (f *fakeAPI) SetPolicyDefaults(_ context.Context, r *cbv1.SetPolicyDefaultsRequest) (*cbv1.BoxPolicy, error) {
	p := &cbv1.BoxPolicy{IdleSeconds: 900, Durable: true, SnapshotEverySeconds: 1800, KeepSnapshots: 5, LeaseIdleSeconds: 120}
	if r.IdleSeconds != nil {
		p.IdleSeconds = r.GetIdleSeconds()
	}
	if r.SnapshotEverySeconds != nil {
		p.SnapshotEverySeconds = r.GetSnapshotEverySeconds()
	}
	return p, nil
}

func (f *fakeAPI) SetBudget(_ context.Context, r *cbv1.SetBudgetRequest) (*cbv1.Budget, error) {
	if r.GetUser() != "ann" {
		return nil, status.Errorf(codes.NotFound, "user %s not found", r.GetUser())
	}
	b := &cbv1.Budget{User: "ann", TokensUsed: 12400, BoxHoursUsed: 3.25}
	if r.TokensPerMonth != nil {
		b.TokensPerMonth = r.GetTokensPerMonth()
	}
	if r.BoxHoursPerMonth != nil {
		b.BoxHoursPerMonth = r.GetBoxHoursPerMonth()
	}
	return b, nil
}

func (f *fakeAPI) GetUsage(_ context.Context, r *cbv1.GetUsageRequest) (*cbv1.GetUsageResponse, error) {
	resp := &cbv1.GetUsageResponse{Since: r.GetSince()}
	switch r.GetBy() {
	case "run":
		resp.Rows = []*cbv1.UsageRow{
			{Key: "run_ok", Model: "gpt-x", Calls: 3, InputTokens: 12000, CachedTokens: 8000, OutputTokens: 900, CostUsd: 0.0215},
			{Key: "run_bad", Model: "gpt-x", Calls: 1, InputTokens: 400, OutputTokens: 20, CostUsd: 0.00062},
		}
	case "user", "box":
		resp.Rows = []*cbv1.UsageRow{{Key: "us_ann", Name: "ann", Calls: 4, InputTokens: 12400, CachedTokens: 8000, OutputTokens: 920, CostUsd: 0.02212}}
		if r.GetBy() == "box" {
			resp.Rows = []*cbv1.UsageRow{{Key: "bx_0123456789abcdef", Calls: 4, InputTokens: 12400, CachedTokens: 8000, OutputTokens: 920, CostUsd: 0.02212}}
		}
		resp.Boxes = []*cbv1.BoxUsage{
			{Box: "bx_0123456789abcdef", Name: "web", Owner: "us_ann", OwnerName: "ann", Hours: 3.25, Snapshots: 4, SnapshotBytes: 734003200},
			{Box: "bx_fedcba9876543210", Name: "build", Owner: "us_ann", OwnerName: "ann", Hours: 0.5},
		}
	default:
		return nil, status.Errorf(codes.InvalidArgument, "by: must be user, box, run or model, got %q", r.GetBy())
	}
	return resp, nil
}

func (f *fakeAPI) ListEvents(_ context.Context, r *cbv1.ListEventsRequest) (*cbv1.ListEventsResponse, error) {
	if _, err := f.find(r.GetBox()); err != nil {
		return nil, err
	}
	all := []*cbv1.BoxEvent{
		{Id: 7, Actor: "us_ann", Action: "box.create", Detail: `{"role":"owner","size":"small"}`, At: timestamppb.New(t0)},
		{Id: 9, Actor: "worker", Action: "box.hibernated", Detail: `{"detail":"idle"}`, At: timestamppb.New(t0.Add(15 * time.Minute))},
		{Id: 12, Actor: "us_ann", Action: "box.upload", Detail: "{\"path\":\"/tmp/\u001b[31mx\"}", At: timestamppb.New(t0.Add(20 * time.Minute))},
	}
	var out []*cbv1.BoxEvent
	for _, e := range all {
		if e.GetId() > r.GetAfterId() {
			out = append(out, e)
		}
	}
	return &cbv1.ListEventsResponse{Events: out}, nil
}

// dependencyDown is the API's unavailable answer: what it depends on is down (the detail says
// so, as internal/api's toStatus does), which the CLI does not send again.
func dependencyDown(msg string) error {
	st, err := status.New(codes.Unavailable, msg).WithDetails(&errdetails.ErrorInfo{Reason: api.ReasonDependencyUnavailable, Domain: api.ErrorDomain})
	if err != nil {
		panic(err)
	}
	return st.Err()
}
