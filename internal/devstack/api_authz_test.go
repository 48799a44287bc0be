package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// principal is one caller of the authorization matrix.
type principal struct {
	name  string
	token string
	// role is the caller's role on the box: owner, a share's role, "" for a stranger.
	role cocoonbox.Role
	// unauthenticated callers (no token, a revoked one) are refused before anything else.
	unauthenticated bool
}

// rpc is one call of the matrix: what role it needs on the box ("" for calls about the caller
// alone) and what an allowed caller gets (OK, or Unimplemented for what is not served yet).
type rpc struct {
	name string
	need cocoonbox.Role
	ok   codes.Code
	do   func(ctx context.Context, p principal) error
}

// want is the code p must get from r: unauthenticated callers are refused, a stranger never
// learns that the box exists, a weaker role is told it lacks the role.
func (r rpc) want(p principal) codes.Code {
	switch {
	case p.unauthenticated:
		return codes.Unauthenticated
	case r.need == "":
		return r.ok
	case p.role == "":
		return codes.NotFound
	case !p.role.Allows(r.need):
		return codes.PermissionDenied
	}
	return r.ok
}

// apiEnv is a dev stack with an API client.
type apiEnv struct {
	d    *devstack.Dev
	conn *grpc.ClientConn
	box  cbv1.BoxServiceClient
}

// devAPI dials the stack's API and returns it with the dev user's token (an admin's), from the
// CLI config the stack wrote.
func devAPI(t testing.TB, d *devstack.Dev) (apiEnv, string) {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(d.URLs().API, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	cli, err := config.LoadCLI(d.Bootstrap().CLIConfig, config.MapEnv(nil))
	if err != nil || cli.Token == "" {
		t.Fatalf("cli config: %+v, %v", cli, err)
	}
	return apiEnv{d: d, conn: conn, box: cbv1.NewBoxServiceClient(conn)}, cli.Token
}

func (e apiEnv) as(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// user makes a user with a token, straight in the store.
func (e apiEnv) user(ctx context.Context, t *testing.T, name string) (store.User, string) {
	t.Helper()
	u, err := e.d.Store.CreateUser(ctx, store.NewUser{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := store.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Store.CreateToken(ctx, u.ID, "test", store.HashToken(raw)); err != nil {
		t.Fatal(err)
	}
	return u, raw
}

// TestAPIAuthorization is the API's authorization matrix: every BoxService call, and the
// box-scoped AgentService calls, made by the owner, a viewer, a driver, an admin share, a
// stranger, a revoked token and no token, each answering exactly its expected code. Then an
// expired share, bad input, and a browser's Connect/JSON call.
func TestAPIAuthorization(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, _ := newBoxEnv(t, boxConfig(t), 5*time.Minute)
	// The owner is the dev user, with the token bootstrap wrote to the CLI config.
	e, ownerTok := devAPI(t, d)
	agent := cbv1.NewAgentServiceClient(e.conn)
	vlt := cbv1.NewVaultServiceClient(e.conn)
	_, viewerTok := e.user(ctx, t, "viewer")
	driverUser, driverTok := e.user(ctx, t, "driver")
	_, adminTok := e.user(ctx, t, "boxadmin")
	_, strangerTok := e.user(ctx, t, "stranger")
	spare, _ := e.user(ctx, t, "spare")
	revokedTok, err := store.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	revoked, err := d.Store.CreateToken(ctx, driverUser.ID, "revoked", store.HashToken(revokedTok))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Store.RevokeToken(ctx, driverUser.ID, revoked.ID); err != nil {
		t.Fatal(err)
	}

	ownerCtx := e.as(ctx, ownerTok)
	created, err := e.box.CreateBox(ownerCtx, &cbv1.CreateBoxRequest{Name: "authz"})
	if err != nil || created.GetState() != "running" || created.GetRole() != "owner" || created.GetOwner() != owner.ID {
		t.Fatalf("CreateBox: %v, %v", created, err)
	}
	id := created.GetId()
	second, err := e.box.CreateBox(ownerCtx, &cbv1.CreateBoxRequest{Name: "authz2", Size: "small"})
	if err != nil {
		t.Fatalf("CreateBox authz2: %v", err)
	}
	for user, role := range map[string]string{"viewer": "viewer", "driver": "driver", "boxadmin": "admin"} {
		if _, err := e.box.ShareBox(ownerCtx, &cbv1.ShareBoxRequest{Box: id, User: user, Role: role}); err != nil {
			t.Fatalf("share with %s: %v", user, err)
		}
	}
	if _, err := e.box.WriteFile(ownerCtx, &cbv1.WriteFileRequest{Box: "authz", Path: "/root/authz.txt", Content: []byte("hello")}); err != nil {
		t.Fatalf("WriteFile by name: %v", err)
	}
	if got, err := e.box.ReadFile(ownerCtx, &cbv1.ReadFileRequest{Box: id, Path: "/root/authz.txt"}); err != nil || string(got.GetContent()) != "hello" || got.GetMode() != 0o644 {
		t.Fatalf("ReadFile: %v, %v", got, err)
	}

	// An ended run on the box, recorded as its workflow leaves one: starting a real run needs a
	// model gateway, and what is checked here is who may read and act on runs.
	const runID = "run_authz"
	if _, err := d.Store.CreateAgentRun(ctx, store.NewAgentRun{ID: runID, BoxID: cocoonbox.BoxID(id), Owner: owner.ID,
		Task: "look around", Provider: "openai", Model: "m"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Store.AppendAgentStep(ctx, store.NewAgentStep{RunID: runID, Step: 1, Kind: "model_turn", Summary: "looked"}); err != nil {
		t.Fatal(err)
	}
	if err := d.Store.SetAgentRunState(ctx, runID, cocoonbox.AgentRunSucceeded, ""); err != nil {
		t.Fatal(err)
	}

	principals := []principal{
		{name: "no token", unauthenticated: true},
		{name: "revoked token", token: revokedTok, unauthenticated: true},
		{name: "stranger", token: strangerTok},
		{name: "viewer", token: viewerTok, role: cocoonbox.RoleViewer},
		{name: "driver", token: driverTok, role: cocoonbox.RoleDriver},
		{name: "admin share", token: adminTok, role: cocoonbox.RoleAdmin},
		{name: "owner", token: ownerTok, role: cocoonbox.RoleOwner},
	}
	call := func(f func(context.Context) error) func(context.Context, principal) error {
		return func(ctx context.Context, _ principal) error { return f(ctx) }
	}
	var calls []rpc
	add := func(name string, need cocoonbox.Role, ok codes.Code, do func(context.Context, principal) error) {
		calls = append(calls, rpc{name: name, need: need, ok: ok, do: do})
	}
	add("GetBox", cocoonbox.RoleViewer, codes.OK, call(func(ctx context.Context) error {
		return errOf(e.box.GetBox(ctx, &cbv1.GetBoxRequest{Box: id}))
	}))
	add("ListSnapshots", cocoonbox.RoleViewer, codes.OK, call(func(ctx context.Context) error {
		return errOf(e.box.ListSnapshots(ctx, &cbv1.ListSnapshotsRequest{Box: id}))
	}))
	add("WatchBox", cocoonbox.RoleViewer, codes.OK, call(func(ctx context.Context) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		s, err := e.box.WatchBox(ctx, &cbv1.WatchBoxRequest{Box: id})
		if err != nil {
			return err
		}
		b, err := s.Recv()
		if err == nil && b.GetId() != id {
			t.Errorf("WatchBox sent %v", b)
		}
		return err
	}))
	add("ListShares", cocoonbox.RoleAdmin, codes.OK, call(func(ctx context.Context) error {
		return errOf(e.box.ListShares(ctx, &cbv1.ListSharesRequest{Box: id}))
	}))
	// The box has no NIC, so an admin's change is refused by the workflow, after the role check.
	add("SetBoxNetwork", cocoonbox.RoleAdmin, codes.FailedPrecondition, call(func(ctx context.Context) error {
		return errOf(e.box.SetBoxNetwork(ctx, &cbv1.SetBoxNetworkRequest{Box: id, Network: "internet"}))
	}))
	add("ListEvents", cocoonbox.RoleDriver, codes.OK, call(func(ctx context.Context) error {
		return errOf(e.box.ListEvents(ctx, &cbv1.ListEventsRequest{Box: id}))
	}))
	add("SetPolicy", cocoonbox.RoleAdmin, codes.OK, call(func(ctx context.Context) error {
		return errOf(e.box.SetPolicy(ctx, &cbv1.SetPolicyRequest{Box: id, KeepSnapshots: proto.Int32(5)}))
	}))
	add("ListPorts", cocoonbox.RoleViewer, codes.OK, call(func(ctx context.Context) error {
		return errOf(e.box.ListPorts(ctx, &cbv1.ListPortsRequest{Box: id}))
	}))
	add("DesktopTicket(view)", cocoonbox.RoleViewer, codes.OK, call(func(ctx context.Context) error {
		return errOf(e.box.DesktopTicket(ctx, &cbv1.DesktopTicketRequest{Box: id}))
	}))
	add("DesktopTicket(control)", cocoonbox.RoleDriver, codes.FailedPrecondition, call(func(ctx context.Context) error {
		return errOf(e.box.DesktopTicket(ctx, &cbv1.DesktopTicketRequest{Box: id, Control: true}))
	}))
	add("TakeOver+HandBack", cocoonbox.RoleDriver, codes.OK, call(func(ctx context.Context) error {
		b, err := e.box.TakeOver(ctx, &cbv1.TakeOverRequest{Box: id})
		if err != nil {
			return err
		}
		if b.GetController() == "" {
			t.Errorf("TakeOver answered no controller: %v", b)
		}
		b, err = e.box.HandBack(ctx, &cbv1.HandBackRequest{Box: id})
		if err == nil && b.GetController() != "" {
			t.Errorf("HandBack left controller %q", b.GetController())
		}
		return err
	}))
	// A blank task: an allowed caller gets past the role check to the field check, so no run
	// starts whatever model the server is configured with.
	add("Agent.StartRun", cocoonbox.RoleDriver, codes.InvalidArgument, call(func(ctx context.Context) error {
		return errOf(agent.StartRun(ctx, &cbv1.StartRunRequest{Box: id, Task: " "}))
	}))
	add("Agent.ListRuns", cocoonbox.RoleViewer, codes.OK, call(func(ctx context.Context) error {
		return errOf(agent.ListRuns(ctx, &cbv1.ListRunsRequest{Box: id}))
	}))
	add("Agent.GetRun", "", codes.NotFound, call(func(ctx context.Context) error {
		return errOf(agent.GetRun(ctx, &cbv1.GetRunRequest{RunId: "run_1"}))
	}))
	add("Agent.GetRun(ended)", cocoonbox.RoleViewer, codes.OK, call(func(ctx context.Context) error {
		return errOf(agent.GetRun(ctx, &cbv1.GetRunRequest{RunId: runID}))
	}))
	add("Agent.WatchRun(ended)", cocoonbox.RoleViewer, codes.OK, call(func(ctx context.Context) error {
		stream, err := agent.WatchRun(ctx, &cbv1.WatchRunRequest{RunId: runID})
		if err != nil {
			return err
		}
		var last *cbv1.WatchRunEvent
		for {
			e, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				if last.GetRun().GetState() != "succeeded" {
					t.Errorf("WatchRun ended on %v, want the succeeded run", last)
				}
				return nil
			}
			if err != nil {
				return err
			}
			last = e
		}
	}))
	// An ended run takes no messages: an allowed caller gets past the role check to that.
	add("Agent.SendMessage(ended)", cocoonbox.RoleDriver, codes.FailedPrecondition, call(func(ctx context.Context) error {
		return errOf(agent.SendMessage(ctx, &cbv1.SendMessageRequest{RunId: runID, Text: "hello"}))
	}))
	add("Agent.CancelRun(ended)", cocoonbox.RoleDriver, codes.OK, call(func(ctx context.Context) error {
		return errOf(agent.CancelRun(ctx, &cbv1.CancelRunRequest{RunId: runID}))
	}))
	add("Vault.ListSecrets", "", codes.OK, call(func(ctx context.Context) error {
		return errOf(vlt.ListSecrets(ctx, &cbv1.ListSecretsRequest{}))
	}))
	add("ListBoxes", "", codes.OK, func(ctx context.Context, p principal) error {
		resp, err := e.box.ListBoxes(ctx, &cbv1.ListBoxesRequest{})
		if err != nil {
			return err
		}
		var roles []string
		for _, b := range resp.GetBoxes() {
			if b.GetId() == id {
				roles = append(roles, b.GetRole())
			}
		}
		if want := string(p.role); want == "" && len(roles) != 0 || want != "" && (len(roles) != 1 || roles[0] != want) {
			t.Errorf("ListBoxes as %s shows the box with roles %v, want %q", p.name, roles, want)
		}
		return nil
	})
	add("CreateBox", "", codes.OK, func(ctx context.Context, p principal) error {
		if !p.unauthenticated {
			return nil // every user may create boxes; the owner made the two under test
		}
		return errOf(e.box.CreateBox(ctx, &cbv1.CreateBoxRequest{Name: "nope"}))
	})
	add("Exec", cocoonbox.RoleDriver, codes.OK, call(func(ctx context.Context) error {
		res, err := e.box.Exec(ctx, &cbv1.ExecRequest{Box: id, Argv: []string{"sh", "-c", "echo $X; exit 3"}, Env: map[string]string{"X": "hi"}})
		if err == nil && (res.GetExitCode() != 3 || res.GetStdout() != "hi\n") {
			t.Errorf("Exec = %v", res)
		}
		return err
	}))
	add("ReadFile", cocoonbox.RoleDriver, codes.OK, call(func(ctx context.Context) error {
		return errOf(e.box.ReadFile(ctx, &cbv1.ReadFileRequest{Box: id, Path: "/root/authz.txt"}))
	}))
	add("WriteFile", cocoonbox.RoleDriver, codes.OK, call(func(ctx context.Context) error {
		return errOf(e.box.WriteFile(ctx, &cbv1.WriteFileRequest{Box: id, Path: "/root/w/f.txt", Content: []byte("x")}))
	}))
	add("HibernateBox+WakeBox", cocoonbox.RoleDriver, codes.OK, call(func(ctx context.Context) error {
		if b, err := e.box.HibernateBox(ctx, &cbv1.HibernateBoxRequest{Box: id}); err != nil || b.GetState() != "hibernated" {
			return orState(err, b)
		}
		b, err := e.box.WakeBox(ctx, &cbv1.WakeBoxRequest{Box: id})
		return orState(err, b)
	}))
	add("SnapshotBox", cocoonbox.RoleDriver, codes.OK, call(func(ctx context.Context) error {
		s, err := e.box.SnapshotBox(ctx, &cbv1.SnapshotBoxRequest{Box: id})
		if err == nil && (s.GetState() != "complete" || s.GetBoxId() != id) {
			t.Errorf("SnapshotBox = %v", s)
		}
		return err
	}))
	add("ShareBox+UnshareBox", cocoonbox.RoleAdmin, codes.OK, call(func(ctx context.Context) error {
		if _, err := e.box.ShareBox(ctx, &cbv1.ShareBoxRequest{Box: id, User: spare.ID, Role: "viewer"}); err != nil {
			return err
		}
		return errOf(e.box.UnshareBox(ctx, &cbv1.UnshareBoxRequest{Box: id, User: "spare"}))
	}))
	add("RestoreBox", cocoonbox.RoleAdmin, codes.OK, call(func(ctx context.Context) error {
		b, err := e.box.RestoreBox(ctx, &cbv1.RestoreBoxRequest{Box: id})
		return orState(err, b)
	}))
	// The owner deletes the second box; the admin share deletes the box under test, last.
	add("DeleteBox", cocoonbox.RoleAdmin, codes.OK, func(ctx context.Context, p principal) error {
		target := id
		if p.role == cocoonbox.RoleOwner {
			target = second.GetId()
		}
		b, err := e.box.DeleteBox(ctx, &cbv1.DeleteBoxRequest{Box: target})
		if err == nil && b.GetState() != "deleted" {
			t.Errorf("DeleteBox = %v", b)
		}
		return err
	})

	// A name means one of the caller's own boxes: a shared box is named by its ID.
	if _, err := e.box.GetBox(e.as(ctx, viewerTok), &cbv1.GetBoxRequest{Box: "authz"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetBox of a shared box by its name: %v; want NotFound", err)
	}
	checkExpiredShare(ctx, t, e, ownerCtx, second.GetId(), strangerTok)
	checkBadInput(ctx, t, e, ownerCtx, id)
	checkConnectGetBox(t, d, ownerTok, id)
	checkMCPMatrix(ctx, t, d, principals, id, runID)

	for _, r := range calls {
		// Refusals first, so the allowed callers of a state change find the box as it was.
		var order []principal
		for _, p := range principals {
			if r.want(p) != r.ok {
				order = append(order, p)
			}
		}
		for _, p := range principals {
			if r.want(p) == r.ok {
				order = append(order, p)
			}
		}
		for _, p := range order {
			err := r.do(e.as(ctx, p.token), p)
			if got, want := status.Code(err), r.want(p); got != want {
				t.Errorf("%s as %s: %v; want %s", r.name, p.name, err, want)
			}
		}
	}
	// The box is gone for everyone, its admin share included.
	for _, p := range principals[2:] {
		_, err := e.box.GetBox(e.as(ctx, p.token), &cbv1.GetBoxRequest{Box: id})
		if status.Code(err) != codes.NotFound {
			t.Errorf("GetBox of the deleted box as %s: %v; want NotFound", p.name, err)
		}
	}
}

// orState passes err on, or fails a call that answered a box in a state it should not be in.
func orState(err error, b *cbv1.Box) error {
	if err != nil {
		return err
	}
	if b.GetState() != "running" && b.GetState() != "hibernated" {
		return status.Errorf(codes.Internal, "box %s is %s", b.GetId(), b.GetState())
	}
	return nil
}

// checkExpiredShare: a share that has expired reads as no share at all.
func checkExpiredShare(ctx context.Context, t *testing.T, e apiEnv, ownerCtx context.Context, id, token string) {
	t.Helper()
	expires := time.Now().Add(2 * time.Second)
	if _, err := e.box.ShareBox(ownerCtx, &cbv1.ShareBoxRequest{Box: id, User: "stranger", Role: "viewer", ExpiresAt: timestamppb.New(expires)}); err != nil {
		t.Fatalf("share expiring: %v", err)
	}
	if _, err := e.box.GetBox(e.as(ctx, token), &cbv1.GetBoxRequest{Box: id}); err != nil {
		t.Fatalf("GetBox before the share expires: %v", err)
	}
	err := testutil.Poll(ctx, 15*time.Second, func() error {
		_, err := e.box.GetBox(e.as(ctx, token), &cbv1.GetBoxRequest{Box: id})
		if status.Code(err) != codes.NotFound {
			return status.Errorf(codes.Unknown, "GetBox after the share expired: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(expires) {
		t.Fatal("the share ended before its expiry")
	}
}

// checkBadInput: malformed requests are refused naming the field; unknown boxes are not found.
func checkBadInput(ctx context.Context, t *testing.T, e apiEnv, ownerCtx context.Context, id string) {
	t.Helper()
	cases := []struct {
		name string
		err  error
		code codes.Code
		want string
	}{
		{"malformed box ID", errOf(e.box.GetBox(ownerCtx, &cbv1.GetBoxRequest{Box: "bx_XYZ"})), codes.InvalidArgument, "box:"},
		{"no box", errOf(e.box.GetBox(ownerCtx, &cbv1.GetBoxRequest{})), codes.InvalidArgument, "box:"},
		{"unknown box ID", errOf(e.box.GetBox(ownerCtx, &cbv1.GetBoxRequest{Box: "bx_0000000000000000"})), codes.NotFound, "bx_0000000000000000"},
		{"unknown box name", errOf(e.box.GetBox(ownerCtx, &cbv1.GetBoxRequest{Box: "nosuch"})), codes.NotFound, "nosuch"},
		{"oversized WriteFile", errOf(e.box.WriteFile(ownerCtx, &cbv1.WriteFileRequest{Box: id, Path: "/root/big", Content: make([]byte, 8<<20+1)})), codes.InvalidArgument, "content"},
		{"empty argv", errOf(e.box.Exec(ownerCtx, &cbv1.ExecRequest{Box: id})), codes.InvalidArgument, "argv"},
		{"relative cwd", errOf(e.box.Exec(ownerCtx, &cbv1.ExecRequest{Box: id, Argv: []string{"true"}, Cwd: "tmp"})), codes.InvalidArgument, "cwd"},
		{"relative path", errOf(e.box.ReadFile(ownerCtx, &cbv1.ReadFileRequest{Box: id, Path: "etc/passwd"})), codes.InvalidArgument, "path"},
		{"missing file", errOf(e.box.ReadFile(ownerCtx, &cbv1.ReadFileRequest{Box: id, Path: "/root/nope"})), codes.NotFound, "path"},
		{"bad role", errOf(e.box.ShareBox(ownerCtx, &cbv1.ShareBoxRequest{Box: id, User: "spare", Role: "owner"})), codes.InvalidArgument, "role"},
		// Share does not tell unknown users from known ones (boxsvc.Share).
		{"unknown user", errOf(e.box.ShareBox(ownerCtx, &cbv1.ShareBoxRequest{Box: id, User: "nobody", Role: "viewer"})), codes.OK, ""},
		{"bad request_id", errOf(e.box.CreateBox(ownerCtx, &cbv1.CreateBoxRequest{Name: "x", RequestId: "bx_1"})), codes.InvalidArgument, "request_id"},
		{"bad snapshot_id", errOf(e.box.RestoreBox(ownerCtx, &cbv1.RestoreBoxRequest{Box: id, SnapshotId: "sn_x"})), codes.InvalidArgument, "snapshot_id"},
	}
	for _, tc := range cases {
		if status.Code(tc.err) != tc.code || !strings.Contains(status.Convert(tc.err).Message(), tc.want) {
			t.Errorf("%s: %v; want %s naming %q", tc.name, tc.err, tc.code, tc.want)
		}
	}
}

// errOf keeps a call's error.
func errOf(_ any, err error) error { return err }

// checkConnectGetBox calls GetBox as a browser does: a JSON POST with a bearer header.
func checkConnectGetBox(t *testing.T, d *devstack.Dev, token, id string) {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	post := func(body string) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodPost, d.URLs().API+"/cocoonbox.v1.BoxService/GetBox", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("GetBox over Connect: %d %q: %v", resp.StatusCode, b, err)
		}
		return resp.StatusCode, m
	}
	code, m := post(`{"box":"` + id + `"}`)
	if code != http.StatusOK || m["id"] != id || m["role"] != "owner" || m["state"] != "running" || m["name"] != "authz" {
		t.Fatalf("GetBox over Connect: %d %v", code, m)
	}
	code, m = post(`{"box":"` + id + `","bogus":1}`)
	if msg, _ := m["message"].(string); code != http.StatusBadRequest || m["code"] != "invalid_argument" || !strings.Contains(msg, "bogus") {
		t.Fatalf("GetBox over Connect with an unknown field: %d %v", code, m)
	}
	code, m = post(`{"box":"bx_0000000000000000"}`)
	if code != http.StatusNotFound || m["code"] != "not_found" {
		t.Fatalf("GetBox over Connect of an unknown box: %d %v", code, m)
	}
}

// checkMCPMatrix is the authorization matrix over MCP: every tool, called by every principal,
// answers as its gRPC counterpart does. Callers without a valid token are refused at connect
// (401); a stranger's tool errors say not_found, a weaker role's say forbidden.
func checkMCPMatrix(ctx context.Context, t *testing.T, d *devstack.Dev, principals []principal, id, runID string) {
	t.Helper()
	endpoint := d.URLs().API + "/mcp"
	tools := []struct {
		name string
		need cocoonbox.Role
		args map[string]any
		ok   string // the error an allowed caller gets past the role check to; "" is success
	}{
		{"box_list", "", map[string]any{}, ""},
		{"box_exec", cocoonbox.RoleDriver, map[string]any{"box": id, "argv": []string{"true"}}, ""},
		{"box_read_file", cocoonbox.RoleDriver, map[string]any{"box": id, "path": "/root/authz.txt"}, ""},
		{"box_write_file", cocoonbox.RoleDriver, map[string]any{"box": id, "path": "/root/mcp.txt", "content": "x"}, ""},
		{"box_hibernate", cocoonbox.RoleDriver, map[string]any{"box": id}, ""},
		{"box_wake", cocoonbox.RoleDriver, map[string]any{"box": id}, ""},
		{"box_events", cocoonbox.RoleDriver, map[string]any{"box": id, "limit": 5}, ""},
		{"box_policy", cocoonbox.RoleAdmin, map[string]any{"box": id, "keep_snapshots": 5}, ""},
		{"box_snapshot", cocoonbox.RoleDriver, map[string]any{"box": id}, ""},
		// The base image has no agent: an allowed caller gets past the role check to the relay,
		// which finds nothing listening.
		{"box_screenshot", cocoonbox.RoleViewer, map[string]any{"box": id}, "unavailable"},
		{"box_click", cocoonbox.RoleDriver, map[string]any{"box": id, "x": 10, "y": 10}, "unavailable"},
		{"box_type", cocoonbox.RoleDriver, map[string]any{"box": id, "text": "hi"}, "unavailable"},
		{"box_key", cocoonbox.RoleDriver, map[string]any{"box": id, "keys": "Return"}, "unavailable"},
		// A blank task, as for Agent.StartRun; runID names an ended run.
		{"agent_run", cocoonbox.RoleDriver, map[string]any{"box": id, "task": " "}, "invalid"},
		{"agent_status", cocoonbox.RoleViewer, map[string]any{"run": runID}, ""},
		{"agent_message", cocoonbox.RoleDriver, map[string]any{"run": runID, "text": "hello"}, "conflict"},
	}
	for _, p := range principals {
		c, err := mcpConnect(ctx, t, endpoint, p.token)
		if p.unauthenticated {
			if !isAuthRequired(err) {
				t.Errorf("MCP connect as %s: %v; want 401", p.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("MCP connect as %s: %v", p.name, err)
		}
		for _, tool := range tools {
			res := mcpCallRaw(ctx, t, c, tool.name, tool.args)
			want := tool.ok
			switch {
			case tool.need == "":
			case p.role == "":
				want = "not_found"
			case !p.role.Allows(tool.need):
				want = "forbidden"
			}
			text := mcpText(res)
			switch {
			case want == "" && res.IsError:
				t.Errorf("MCP %s as %s: tool error %q; want success", tool.name, p.name, text)
			case want != "" && (!res.IsError || !strings.HasPrefix(text, want)):
				t.Errorf("MCP %s as %s: %q (isError %v); want an error starting %s", tool.name, p.name, text, res.IsError, want)
			}
		}
		// Every user may create boxes of their own.
		var box struct{ Role cocoonbox.Role }
		mcpCall(ctx, t, c, "box_create", map[string]any{"name": "mcp-" + strings.ReplaceAll(p.name, " ", "-"), "size": "small"}, &box)
		if box.Role != cocoonbox.RoleOwner {
			t.Errorf("MCP box_create as %s: role %q, want owner", p.name, box.Role)
		}
	}
}
