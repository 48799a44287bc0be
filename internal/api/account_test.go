package api_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/internal/api"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// wantCode fails the test unless err has code and, when want is set, a message containing it.
func wantCode(t *testing.T, what string, err error, code codes.Code, want string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), want) {
		t.Errorf("%s: %v; want %s %q", what, err, code, want)
	}
}

func TestTokens(t *testing.T) {
	f := serveOpts(t, api.Options{})
	u, first, raw := f.mint(t, "ann", false)
	_, _, other := f.mint(t, "bob", false)
	acct := cbv1.NewAccountServiceClient(f.conn(t))

	made, err := acct.CreateToken(as(t, raw), &cbv1.CreateTokenRequest{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	tok := made.GetToken()
	if !strings.HasPrefix(made.GetSecret(), "cbx_") || tok.GetName() != "ci" || tok.GetExpiresAt() != nil || tok.GetRevokedAt() != nil {
		t.Fatalf("CreateToken = %v", made)
	}
	who, err := acct.WhoAmI(as(t, made.GetSecret()), &cbv1.WhoAmIRequest{})
	if err != nil || who.GetUser().GetId() != u.ID || who.GetTokenName() != "ci" {
		t.Fatalf("the new token: %v, %v", who, err)
	}

	short, err := acct.CreateToken(as(t, raw), &cbv1.CreateTokenRequest{Name: "short", TtlSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if exp := short.GetToken().GetExpiresAt().AsTime(); exp.Before(time.Now()) || exp.After(time.Now().Add(2*time.Second)) {
		t.Fatalf("a 1 s token expires at %v", exp)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := acct.WhoAmI(as(t, short.GetSecret()), &cbv1.WhoAmIRequest{})
		if status.Code(err) == codes.Unauthenticated {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("an expired token: %v; want Unauthenticated", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	list, err := acct.ListTokens(as(t, raw), &cbv1.ListTokensRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tk := range list.GetTokens() {
		names = append(names, tk.GetName())
	}
	if strings.Join(names, ",") != "short,ci,laptop" {
		t.Fatalf("ListTokens = %v, want short,ci,laptop (newest first)", names)
	}
	if strings.Contains(list.String(), made.GetSecret()) {
		t.Fatal("ListTokens shows a secret")
	}

	if _, err := acct.RevokeToken(as(t, raw), &cbv1.RevokeTokenRequest{Id: tok.GetId()}); err != nil {
		t.Fatal(err)
	}
	_, err = acct.WhoAmI(as(t, made.GetSecret()), &cbv1.WhoAmIRequest{})
	wantCode(t, "a revoked token", err, codes.Unauthenticated, "")
	_, err = acct.RevokeToken(as(t, other), &cbv1.RevokeTokenRequest{Id: first.ID})
	wantCode(t, "revoking another user's token", err, codes.NotFound, "id")
	_, err = acct.RevokeToken(as(t, raw), &cbv1.RevokeTokenRequest{})
	wantCode(t, "revoking no token", err, codes.InvalidArgument, "id")
	if _, err := acct.WhoAmI(as(t, raw), &cbv1.WhoAmIRequest{}); err != nil {
		t.Fatalf("ann's first token after bob tried to revoke it: %v", err)
	}

	_, err = acct.CreateToken(as(t, raw), &cbv1.CreateTokenRequest{})
	wantCode(t, "a token without a name", err, codes.InvalidArgument, "name")
	_, err = acct.CreateToken(as(t, raw), &cbv1.CreateTokenRequest{Name: strings.Repeat("x", 101)})
	wantCode(t, "a long token name", err, codes.InvalidArgument, "name")
	_, err = acct.CreateToken(as(t, raw), &cbv1.CreateTokenRequest{Name: "x", TtlSeconds: -1})
	wantCode(t, "a negative ttl", err, codes.InvalidArgument, "ttl_seconds")

	// Token changes are audited, never with a secret.
	events, err := f.st.EventsByActor(context.Background(), u.ID, 20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range events {
		seen[e.Action] = true
		if strings.Contains(string(e.Detail), "cbx_") {
			t.Fatalf("audit event %s carries a token secret: %s", e.Action, e.Detail)
		}
	}
	if !seen["token.create"] || !seen["token.revoke"] {
		t.Fatalf("ann's audit trail %v lacks token.create or token.revoke", seen)
	}
}

func TestCreateUserIsForAdmins(t *testing.T) {
	f := serveOpts(t, api.Options{})
	_, _, admin := f.mint(t, "root", true)
	_, _, plain := f.mint(t, "ann", false)
	acct := cbv1.NewAccountServiceClient(f.conn(t))

	_, err := acct.CreateUser(as(t, plain), &cbv1.CreateUserRequest{Name: "eve"})
	wantCode(t, "a non-admin creating a user", err, codes.PermissionDenied, "admin")

	made, err := acct.CreateUser(as(t, admin), &cbv1.CreateUserRequest{Name: "eve"})
	if err != nil {
		t.Fatal(err)
	}
	if made.GetUser().GetName() != "eve" || made.GetUser().GetAdmin() || made.GetSecret() == "" {
		t.Fatalf("CreateUser = %v", made)
	}
	who, err := acct.WhoAmI(as(t, made.GetSecret()), &cbv1.WhoAmIRequest{})
	if err != nil || who.GetUser().GetId() != made.GetUser().GetId() || who.GetTokenName() != "first" {
		t.Fatalf("the new user's token: %v, %v", who, err)
	}

	_, err = acct.CreateUser(as(t, admin), &cbv1.CreateUserRequest{Name: "eve"})
	wantCode(t, "a taken name", err, codes.FailedPrecondition, "name")
	_, err = acct.CreateUser(as(t, admin), &cbv1.CreateUserRequest{Name: "Eve!"})
	wantCode(t, "a malformed name", err, codes.InvalidArgument, "name")
}

// TestDisableUser: an admin lists users and disables one by name; the user's tokens stop
// working at once, the listing says so, and nobody else's do. A non-admin can do neither, and an
// admin cannot disable themselves.
func TestDisableUser(t *testing.T) {
	f := serveOpts(t, api.Options{})
	_, _, admin := f.mint(t, "root", true)
	_, _, ann := f.mint(t, "ann", false)
	_, _, bob := f.mint(t, "bob", false)
	acct := cbv1.NewAccountServiceClient(f.conn(t))

	_, err := acct.ListUsers(as(t, ann), &cbv1.ListUsersRequest{})
	wantCode(t, "a non-admin listing users", err, codes.PermissionDenied, "admin")
	_, err = acct.DisableUser(as(t, ann), &cbv1.DisableUserRequest{User: "bob"})
	wantCode(t, "a non-admin disabling a user", err, codes.PermissionDenied, "admin")
	_, err = acct.DisableUser(as(t, admin), &cbv1.DisableUserRequest{User: "root"})
	wantCode(t, "an admin disabling themselves", err, codes.InvalidArgument, "user")
	_, err = acct.DisableUser(as(t, admin), &cbv1.DisableUserRequest{User: "nobody"})
	wantCode(t, "an unknown user", err, codes.NotFound, "nobody")

	got, err := acct.DisableUser(as(t, admin), &cbv1.DisableUserRequest{User: "ann"})
	if err != nil || got.GetUser().GetName() != "ann" || got.GetUser().GetDisabledAt() == nil || got.GetTokensRevoked() != 1 {
		t.Fatalf("DisableUser(ann) = %v, %v; want ann disabled and her token revoked", got, err)
	}
	_, err = acct.WhoAmI(as(t, ann), &cbv1.WhoAmIRequest{})
	wantCode(t, "a disabled user's token", err, codes.Unauthenticated, "")
	if who, err := acct.WhoAmI(as(t, bob), &cbv1.WhoAmIRequest{}); err != nil || who.GetUser().GetName() != "bob" {
		t.Fatalf("bob after ann is disabled: %v, %v", who, err)
	}
	list, err := acct.ListUsers(as(t, admin), &cbv1.ListUsersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	disabled := map[string]bool{}
	for _, u := range list.GetUsers() {
		disabled[u.GetName()] = u.GetDisabledAt() != nil
	}
	if want := map[string]bool{"ann": true, "bob": false, "root": false}; !maps.Equal(disabled, want) {
		t.Fatalf("ListUsers: disabled %v, want %v", disabled, want)
	}
}
