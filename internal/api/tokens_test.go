package api_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/api"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// TestTokenCannotOutliveItsMinter: a token that expires cannot mint one that expires later, or
// never; one that expires no later is fine.
func TestTokenCannotOutliveItsMinter(t *testing.T) {
	f := serveOpts(t, api.Options{})
	_, _, raw := f.mint(t, "ann", false)
	acct := cbv1.NewAccountServiceClient(f.conn(t))

	hour, err := acct.CreateToken(as(t, raw), &cbv1.CreateTokenRequest{Name: "ci", TtlSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	exp := hour.GetToken().GetExpiresAt().AsTime()

	_, err = acct.CreateToken(as(t, hour.GetSecret()), &cbv1.CreateTokenRequest{Name: "forever"})
	wantCode(t, "no expiry from an expiring token", err, codes.InvalidArgument, "ttl_seconds: ")
	_, err = acct.CreateToken(as(t, hour.GetSecret()), &cbv1.CreateTokenRequest{Name: "longer", TtlSeconds: 7200})
	wantCode(t, "a longer expiry from an expiring token", err, codes.InvalidArgument, "ttl_seconds: ")

	shorter, err := acct.CreateToken(as(t, hour.GetSecret()), &cbv1.CreateTokenRequest{Name: "shorter", TtlSeconds: 60})
	if err != nil {
		t.Fatalf("a shorter expiry: %v", err)
	}
	if got := shorter.GetToken().GetExpiresAt().AsTime(); got.After(exp) {
		t.Fatalf("minted token expires at %v, after its minter's %v", got, exp)
	}
	toks, err := acct.ListTokens(as(t, raw), &cbv1.ListTokensRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range toks.GetTokens() {
		if tok.GetName() == "forever" || tok.GetName() == "longer" {
			t.Errorf("a refused token was stored: %v", tok)
		}
	}
}

// TestTokenScopes: a read token reads but changes nothing, an mcp token works only on /mcp, and
// a token cannot mint one of a wider scope.
func TestTokenScopes(t *testing.T) {
	f, full, runID := agentFixture(t)
	conn := f.conn(t)
	acct := cbv1.NewAccountServiceClient(conn)
	boxes := cbv1.NewBoxServiceClient(conn)
	agent := cbv1.NewAgentServiceClient(conn)

	_, err := acct.CreateToken(as(t, full), &cbv1.CreateTokenRequest{Name: "x", Scope: "admin"})
	wantCode(t, "an unknown scope", err, codes.InvalidArgument, "scope: ")
	read, err := acct.CreateToken(as(t, full), &cbv1.CreateTokenRequest{Name: "dashboard", Scope: "read"})
	if err != nil || read.GetToken().GetScope() != "read" {
		t.Fatalf("CreateToken read = %v, %v", read, err)
	}
	mcpTok, err := acct.CreateToken(as(t, full), &cbv1.CreateTokenRequest{Name: "agent", Scope: "mcp"})
	if err != nil || mcpTok.GetToken().GetScope() != "mcp" {
		t.Fatalf("CreateToken mcp = %v, %v", mcpTok, err)
	}
	if def, err := acct.CreateToken(as(t, full), &cbv1.CreateTokenRequest{Name: "laptop2"}); err != nil || def.GetToken().GetScope() != "full" {
		t.Fatalf("CreateToken with no scope = %v, %v; want full", def, err)
	}

	// read: reading works, changing does not, whichever protocol.
	r := as(t, read.GetSecret())
	// No Temporal here, so GetBox cannot answer; it must not be refused for the scope. The
	// devstack test reads a live box with a read token.
	if _, err := boxes.GetBox(r, &cbv1.GetBoxRequest{Box: "dev"}); grpcstatus.Code(err) == codes.PermissionDenied || grpcstatus.Code(err) == codes.Unauthenticated {
		t.Errorf("read token GetBox: %v", err)
	}
	if _, err := agent.ListRuns(r, &cbv1.ListRunsRequest{Box: "dev"}); err != nil {
		t.Errorf("read token ListRuns: %v", err)
	}
	if _, err := agent.GetRun(r, &cbv1.GetRunRequest{RunId: runID}); err != nil {
		t.Errorf("read token GetRun: %v", err)
	}
	if _, err := acct.WhoAmI(r, &cbv1.WhoAmIRequest{}); err != nil {
		t.Errorf("read token WhoAmI: %v", err)
	}
	_, err = boxes.CreateBox(r, &cbv1.CreateBoxRequest{Name: "new"})
	wantCode(t, "read token CreateBox", err, codes.PermissionDenied, `scope "read"`)
	_, err = boxes.WriteFile(r, &cbv1.WriteFileRequest{Box: "dev", Path: "/tmp/x", Content: []byte("x")})
	wantCode(t, "read token WriteFile", err, codes.PermissionDenied, `scope "read"`)
	_, err = acct.CreateToken(r, &cbv1.CreateTokenRequest{Name: "wider"})
	wantCode(t, "read token CreateToken", err, codes.PermissionDenied, `scope "read"`)
	if code, body := f.connectCall(t, "/cocoonbox.v1.BoxService/CreateBox", read.GetSecret(), `{"name":"new"}`); code != http.StatusForbidden || !strings.Contains(body, `scope \"read\"`) {
		t.Errorf("read token CreateBox over Connect: %d %s, want 403 naming the scope", code, body)
	}
	if code, body := mcpPost(t, f, read.GetSecret()); code != http.StatusForbidden {
		t.Errorf("read token on /mcp: %d %s, want 403", code, body)
	}

	// mcp: only /mcp.
	_, err = boxes.GetBox(as(t, mcpTok.GetSecret()), &cbv1.GetBoxRequest{Box: "dev"})
	wantCode(t, "mcp token GetBox", err, codes.PermissionDenied, `scope "mcp"`)
	if code, body := mcpPost(t, f, mcpTok.GetSecret()); code != http.StatusOK {
		t.Errorf("mcp token on /mcp: %d %s, want 200", code, body)
	}
	if code, _ := mcpPost(t, f, full); code != http.StatusOK {
		t.Errorf("full token on /mcp: %d, want 200", code)
	}
}

// mcpPost sends an MCP initialize request to /mcp with token and returns the HTTP status and body.
func mcpPost(t *testing.T, f fixture, token string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+f.addr+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	return resp.StatusCode, b.String()
}

// TestRevokedTokenEndsOpenStream: revoking a token ends a stream it opened at the next
// recheck, with UNAUTHENTICATED, though the caller's role on the box never changed.
func TestRevokedTokenEndsOpenStream(t *testing.T) {
	ctx := context.Background()
	st := storetest.New(t)
	f := serveOpts(t, api.Options{Store: st, Boxes: &boxsvc.Service{Store: st, WatchEvery: 10 * time.Millisecond}, Recheck: 20 * time.Millisecond})
	u, tok, raw := f.mint(t, "ann", false)
	box := cocoonbox.NewBoxID()
	if _, err := st.CreateBox(ctx, store.NewBox{ID: box, Owner: u.ID, Name: "dev", Size: cocoonbox.DefaultSize}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateAgentRun(ctx, store.NewAgentRun{ID: "run_open", BoxID: box, Owner: u.ID, Task: "wait", Provider: "openai", Model: "m"}); err != nil {
		t.Fatal(err)
	}
	stream, err := cbv1.NewAgentServiceClient(f.conn(t)).WatchRun(as(t, raw), &cbv1.WatchRunRequest{RunId: "run_open"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Recv(); err != nil || ev.GetRun().GetId() != "run_open" {
		t.Fatalf("first event %v, %v", ev, err)
	}
	if err := st.RevokeToken(ctx, u.ID, tok.ID); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := stream.Recv()
		if err == nil {
			continue
		}
		wantCode(t, "the stream of a revoked token", err, codes.Unauthenticated, "revoked")
		return
	}
}
