package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
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
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// panicDesc is a gRPC service whose every method panics, standing in for a handler with a bug
// (such as one that trusts a box's answer).
var panicDesc = grpc.ServiceDesc{
	ServiceName: "cocoonbox.test.Panic",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Boom",
		Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			info := &grpc.UnaryServerInfo{FullMethod: "/cocoonbox.test.Panic/Boom"}
			return icpt(ctx, in, info, func(context.Context, any) (any, error) { panic("boom: a nil the handler did not expect") })
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "BoomStream",
		ServerStreams: true,
		Handler:       func(any, grpc.ServerStream) error { panic("boom in a stream") },
	}},
}

// panicServer serves a Server that has the panicking service, a panicking HTTP route and a
// panicking health check, and returns its address and a token of a user.
func panicServer(t *testing.T, log *slog.Logger) (addr, token string) {
	t.Helper()
	st := storetest.New(t)
	s := New(Options{Store: st, Logger: log, Checks: map[string]Check{
		"boom": func(context.Context) error { panic("boom in a health check") },
	}})
	s.grpc.RegisterService(&panicDesc, struct{}{})
	s.mux.HandleFunc("GET /boom", func(http.ResponseWriter, *http.Request) { panic("boom in an HTTP route") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	u, err := st.CreateUser(context.Background(), store.NewUser{Name: "ann", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := store.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateToken(context.Background(), u.ID, "laptop", store.HashToken(raw)); err != nil {
		t.Fatal(err)
	}
	return ln.Addr().String(), raw
}

// lockedBuffer is a log sink the server's goroutines can write while the test reads it.
type lockedBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func newLockedBuffer() *lockedBuffer { return &lockedBuffer{mu: make(chan struct{}, 1)} }

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.String()
}

// TestPanicAnswersInternal: a handler that panics answers internal on every entry point, the
// panic is logged with its stack, and the server goes on serving.
func TestPanicAnswersInternal(t *testing.T) {
	logs := newLockedBuffer()
	addr, token := panicServer(t, slog.New(slog.NewTextHandler(logs, nil)))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)

	err = conn.Invoke(ctx, "/cocoonbox.test.Panic/Boom", &emptypb.Empty{}, &emptypb.Empty{})
	if status.Code(err) != codes.Internal || status.Convert(err).Message() != "internal error" {
		t.Errorf("unary panic: %v, want Internal \"internal error\"", err)
	}
	st, err := conn.NewStream(ctx, &panicDesc.Streams[0], "/cocoonbox.test.Panic/BoomStream")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&emptypb.Empty{}); err != nil {
		t.Fatal(err)
	}
	_ = st.CloseSend()
	if err := st.RecvMsg(&emptypb.Empty{}); status.Code(err) != codes.Internal {
		t.Errorf("stream panic: %v, want Internal", err)
	}

	resp, err := http.Get("http://" + addr + "/boom")
	if err != nil {
		t.Fatalf("HTTP route panic: %v, want a 500 answer", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), `"internal error"`) {
		t.Errorf("HTTP route panic: %d %s, want 500 internal error", resp.StatusCode, body)
	}

	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("health check panic: %v", err)
	}
	var rep HealthReport
	_ = json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || rep.Components["boom"] != "internal error" {
		t.Errorf("health check panic: %d %+v, want 503 with boom: internal error", resp.StatusCode, rep)
	}

	// Still serving.
	who, err := cbv1.NewAccountServiceClient(conn).WhoAmI(ctx, &cbv1.WhoAmIRequest{})
	if err != nil || who.GetUser().GetName() != "ann" {
		t.Fatalf("after the panics WhoAmI = %v, %v", who, err)
	}
	for _, want := range []string{"boom: a nil the handler did not expect", "boom in a stream", "boom in an HTTP route", "boom in a health check", "recover_test.go"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q (the panic and its stack)", want)
		}
	}
}
