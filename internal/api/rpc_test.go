package api_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/loomhand/cocoonbox/internal/api"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// serveOpts runs a Server built from opts (with a fresh store unless one is given) on a loopback
// port for the test.
func serveOpts(t *testing.T, opts api.Options) fixture {
	t.Helper()
	if opts.Store == nil {
		opts.Store = storetest.New(t)
	}
	srv := api.New(opts)
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
	return fixture{st: opts.Store, addr: ln.Addr().String()}
}

// conn is a gRPC client connection to the fixture, closed when the test ends.
func (f fixture) conn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// as is a context whose calls carry token ("" for none).
func as(t *testing.T, token string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return ctx
}

// connectCall makes a Connect unary call with a JSON body, as a browser does, and returns the
// HTTP status and body.
func (f fixture) connectCall(t *testing.T, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+f.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// connectStream opens a Connect server stream with a JSON request and returns the end-of-stream
// message: the error, if the call failed.
func (f fixture) connectStream(t *testing.T, path, token, body string) string {
	t.Helper()
	var env bytes.Buffer
	env.WriteByte(0)
	_ = binary.Write(&env, binary.BigEndian, uint32(len(body)))
	env.WriteString(body)
	req, err := http.NewRequest(http.MethodPost, "http://"+f.addr+path, &env)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || len(b) < 5 {
		t.Fatalf("%s: HTTP %d %q", path, resp.StatusCode, b)
	}
	var last []byte
	for len(b) >= 5 {
		n := binary.BigEndian.Uint32(b[1:5])
		last, b = b[5:5+n], b[5+n:]
	}
	return string(last)
}

type connectError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func TestConnectJSON(t *testing.T) {
	f := serveOpts(t, api.Options{})
	u, _, raw := f.mint(t, "ann", false)

	code, body := f.connectCall(t, "/cocoonbox.v1.AccountService/WhoAmI", raw, `{}`)
	var who struct {
		User      struct{ ID, Name string }
		TokenName string
	}
	if err := json.Unmarshal([]byte(body), &who); code != http.StatusOK || err != nil {
		t.Fatalf("WhoAmI over Connect: %d %s (%v)", code, body, err)
	}
	if who.User.ID != u.ID || who.User.Name != "ann" || who.TokenName != "laptop" {
		t.Fatalf("WhoAmI over Connect = %s", body)
	}

	cases := []struct {
		name, token, body string
		status            int
		code, want        string
	}{
		{"no token", "", `{}`, http.StatusUnauthorized, "unauthenticated", "missing bearer token"},
		{"bad token", "cbx_nope", `{}`, http.StatusUnauthorized, "unauthenticated", "unknown, expired or revoked token"},
		{"unknown field", raw, `{"bogus": 1}`, http.StatusBadRequest, "invalid_argument", "bogus"},
		{"not json", raw, `{`, http.StatusBadRequest, "invalid_argument", ""},
	}
	for _, tc := range cases {
		code, body := f.connectCall(t, "/cocoonbox.v1.AccountService/WhoAmI", tc.token, tc.body)
		var e connectError
		_ = json.Unmarshal([]byte(body), &e)
		if code != tc.status || e.Code != tc.code || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %d %s; want %d %s %q", tc.name, code, body, tc.status, tc.code, tc.want)
		}
	}

	// fetch() from a browser often names the charset.
	req, _ := http.NewRequest(http.MethodPost, "http://"+f.addr+"/cocoonbox.v1.AccountService/WhoAmI", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Authorization", "Bearer "+raw)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("WhoAmI with a charset: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// The plain routes are still served next to the transcoder, and unknown RPCs are not found.
	if code, _ := f.connectCall(t, "/cocoonbox.v1.AccountService/Nope", raw, `{}`); code != http.StatusNotFound {
		t.Errorf("unknown method: %d, want 404", code)
	}
	if resp, err := http.Get("http://" + f.addr + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("healthz next to connect: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// TestEveryMethodNeedsAToken calls every method of every cocoonbox service without a token, over
// gRPC and over Connect: each must be refused before reaching a service, so no route bypasses
// authentication.
func TestEveryMethodNeedsAToken(t *testing.T) {
	f := serveOpts(t, api.Options{})
	conn := f.conn(t)
	var methods int
	for _, file := range []string{"cocoonbox/v1/box.proto", "cocoonbox/v1/agent.proto", "cocoonbox/v1/vault.proto", "cocoonbox/v1/account.proto"} {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(file)
		if err != nil {
			t.Fatal(err)
		}
		for i := range fd.Services().Len() {
			svc := fd.Services().Get(i)
			for j := range svc.Methods().Len() {
				m := svc.Methods().Get(j)
				methods++
				path := "/" + string(svc.FullName()) + "/" + string(m.Name())
				checkGRPCNeedsToken(t, conn, path, m)
				if m.IsStreamingServer() {
					var e struct{ Error connectError }
					end := f.connectStream(t, path, "", `{}`)
					if err := json.Unmarshal([]byte(end), &e); err != nil || e.Error.Code != "unauthenticated" {
						t.Errorf("%s over Connect without a token: %s", path, end)
					}
					continue
				}
				code, body := f.connectCall(t, path, "", `{}`)
				if code != http.StatusUnauthorized {
					t.Errorf("%s over Connect without a token: %d %s", path, code, body)
				}
			}
		}
	}
	if methods < 30 {
		t.Fatalf("checked %d methods; the services were not all found", methods)
	}
}

// checkGRPCNeedsToken calls method over gRPC without a token with an empty request.
func checkGRPCNeedsToken(t *testing.T, conn *grpc.ClientConn, path string, m protoreflect.MethodDescriptor) {
	t.Helper()
	ctx := as(t, "")
	in, err := protoregistry.GlobalTypes.FindMessageByName(m.Input().FullName())
	if err != nil {
		t.Fatal(err)
	}
	req := in.New().Interface()
	if m.IsStreamingServer() {
		desc := &grpc.StreamDesc{ServerStreams: true}
		s, err := conn.NewStream(ctx, desc, path)
		if err == nil {
			if err = s.SendMsg(req); err == nil {
				_ = s.CloseSend()
				out, _ := protoregistry.GlobalTypes.FindMessageByName(m.Output().FullName())
				err = s.RecvMsg(out.New().Interface())
			}
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s without a token: %v", path, err)
		}
		return
	}
	out, _ := protoregistry.GlobalTypes.FindMessageByName(m.Output().FullName())
	if err := conn.Invoke(ctx, path, req, out.New().Interface()); status.Code(err) != codes.Unauthenticated {
		t.Errorf("%s without a token: %v", path, err)
	}
}

func TestGRPCHealthNeedsNoToken(t *testing.T) {
	var broken error
	clock := &testClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	f := serveOpts(t, api.Options{Now: clock.Now, Checks: map[string]api.Check{
		"temporal": func(context.Context) error { return broken },
	}})
	h := healthpb.NewHealthClient(f.conn(t))
	check := func(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		resp, err := h.Check(as(t, ""), &healthpb.HealthCheckRequest{Service: service})
		return resp.GetStatus(), err
	}
	for _, svc := range []string{"", "cocoonbox.v1.BoxService", "cocoonbox.v1.AccountService"} {
		if st, err := check(svc); err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v, want SERVING", svc, st, err)
		}
	}
	if _, err := check("no.such.Service"); status.Code(err) != codes.NotFound {
		t.Fatalf("health of an unknown service: %v, want NotFound", err)
	}
	broken = errors.New("temporal is down")
	clock.Add(time.Minute) // past the cached result
	if st, err := check(""); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health with a failing check: %v %v, want NOT_SERVING", st, err)
	}
	broken = nil
	clock.Add(time.Minute)
	// Browsers and plain HTTP probes reach the same service through Connect.
	code, body := f.connectCall(t, "/grpc.health.v1.Health/Check", "", `{}`)
	if code != http.StatusOK || !strings.Contains(body, `"SERVING"`) {
		t.Fatalf("health over Connect: %d %s", code, body)
	}
}

func TestReflectionListsServices(t *testing.T) {
	f := serveOpts(t, api.Options{})
	stream, err := reflectionpb.NewServerReflectionClient(f.conn(t)).ServerReflectionInfo(as(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection without a token: %v", err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"cocoonbox.v1.BoxService", "cocoonbox.v1.AgentService", "cocoonbox.v1.VaultService",
		"cocoonbox.v1.AccountService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
}

func TestMetrics(t *testing.T) {
	f := serveOpts(t, api.Options{})
	_, _, raw := f.mint(t, "ann", true) // /metrics is for operators
	acct := cbv1.NewAccountServiceClient(f.conn(t))
	for range 3 {
		if _, err := acct.WhoAmI(as(t, raw), &cbv1.WhoAmIRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := acct.WhoAmI(as(t, ""), &cbv1.WhoAmIRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatal(err)
	}
	f.connectCall(t, "/cocoonbox.v1.AccountService/WhoAmI", raw, `{}`)

	code, text := f.get(t, "/metrics", raw)
	if code != http.StatusOK {
		t.Fatalf("/metrics for an operator: %d %s", code, text)
	}
	for _, want := range []string{
		`cocoonbox_api_requests_total{method="/cocoonbox.v1.AccountService/WhoAmI",code="OK"} 4`,
		`cocoonbox_api_requests_total{method="/cocoonbox.v1.AccountService/WhoAmI",code="Unauthenticated"} 1`,
		`cocoonbox_api_request_duration_seconds_count{method="/cocoonbox.v1.AccountService/WhoAmI"} 5`,
		`cocoonbox_api_request_duration_seconds_bucket{method="/cocoonbox.v1.AccountService/WhoAmI",le="+Inf"} 5`,
		"# TYPE cocoonbox_api_request_duration_seconds histogram",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, raw) || strings.Contains(text, "ann") {
		t.Errorf("metrics name a token or a user:\n%s", text)
	}
}
