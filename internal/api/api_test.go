package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/internal/api"
	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

func TestMain(m *testing.M) { storetest.Main(m) }

type fixture struct {
	st   *store.Store
	addr string
}

func serve(t *testing.T, checks map[string]api.Check) fixture {
	t.Helper()
	st := storetest.New(t)
	srv := api.New(api.Options{Store: st, Checks: checks, Version: "test"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return fixture{st: st, addr: ln.Addr().String()}
}

func (f fixture) whoami(t *testing.T, token string) (*cbv1.WhoAmIResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return cbv1.NewAccountServiceClient(conn).WhoAmI(ctx, &cbv1.WhoAmIRequest{})
}

func (f fixture) mint(t *testing.T, user string, admin bool) (store.User, store.Token, string) {
	t.Helper()
	ctx := context.Background()
	u, err := f.st.CreateUser(ctx, store.NewUser{Name: user, Admin: admin})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := store.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := f.st.CreateToken(ctx, u.ID, "laptop", store.HashToken(raw))
	if err != nil {
		t.Fatal(err)
	}
	return u, tok, raw
}

func TestWhoAmIAndAuth(t *testing.T) {
	f := serve(t, nil)
	u, tok, raw := f.mint(t, "ann", true)

	resp, err := f.whoami(t, raw)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetUser().GetId() != u.ID || resp.GetUser().GetName() != "ann" || !resp.GetUser().GetAdmin() || resp.GetTokenName() != "laptop" {
		t.Fatalf("whoami = %v", resp)
	}

	cases := []struct {
		name, token, want string
	}{
		{"no token", "", "missing bearer token"},
		{"unknown token", "cbx_" + strings.Repeat("a", 52), "unknown, expired or revoked token"},
		{"garbage", "x", "unknown, expired or revoked token"},
	}
	for _, tc := range cases {
		_, err := f.whoami(t, tc.token)
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("%s: %v, want Unauthenticated %q", tc.name, err, tc.want)
		}
	}

	if err := f.st.RevokeToken(context.Background(), u.ID, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.whoami(t, raw); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("revoked token still works: %v", err)
	}
}

func TestHealthz(t *testing.T) {
	broken := errors.New("dial tcp 127.0.0.1:7233: connection refused")
	f := serve(t, map[string]api.Check{
		"postgres": func(context.Context) error { return nil },
		"temporal": func(context.Context) error { return broken },
	})
	if code, body := f.get(t, "/healthz", ""); code != http.StatusServiceUnavailable || body != "{\"status\":\"degraded\"}\n" {
		t.Fatalf("without a token: %d %q, want 503 and the bare status", code, body)
	}
	_, _, admin := f.mint(t, "ops", true)
	code, body := f.get(t, "/healthz", admin)
	var rep api.HealthReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	if code != http.StatusServiceUnavailable || rep.Status != "degraded" {
		t.Fatalf("status %d %q, want 503 degraded", code, rep.Status)
	}
	if rep.Components["postgres"] != "ok" || rep.Components["temporal"] != broken.Error() {
		t.Fatalf("components %v", rep.Components)
	}
}

func TestHealthzBoundsAHungCheck(t *testing.T) {
	f := serve(t, map[string]api.Check{
		"s3": func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
	})
	resp, err := http.Get("http://" + f.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a hung check answered %d, want 503", resp.StatusCode)
	}
}
