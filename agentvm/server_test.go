package agentvm_test

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

const testCredential = "box-credential-123"

type testAgent struct {
	conn  *grpc.ClientConn
	dir   string
	calls *atomic.Int32
}

// startAgent serves an agent on 127.0.0.1:0 and dials it; opts adjust its config.
func startAgent(t *testing.T, opts ...func(*agentvm.Config)) *testAgent {
	t.Helper()
	dir := t.TempDir()
	var n atomic.Int32
	j, err := agentvm.OpenJournal(filepath.Join(dir, "journal"))
	require.NoError(t, err)
	cfg := agentvm.Config{Credential: testCredential, Loop: newLoop(dir, &n), Journal: j}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := agentvm.NewServer(cfg)
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &testAgent{conn: conn, dir: dir, calls: &n}
}

func withCredential(ctx context.Context, cred string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+cred)
}

func TestServerRefusesCallsWithoutTheCredential(t *testing.T) {
	a := startAgent(t)
	info := agentvmv1.NewInfoClient(a.conn)
	for name, ctx := range map[string]context.Context{
		"none":   t.Context(),
		"wrong":  withCredential(t.Context(), "box-credential-124"),
		"prefix": withCredential(t.Context(), testCredential[:5]),
		"scheme": metadata.AppendToOutgoingContext(t.Context(), "authorization", "Basic "+testCredential),
		"twice":  metadata.AppendToOutgoingContext(withCredential(t.Context(), testCredential), "authorization", "Bearer x"),
	} {
		_, err := info.Get(ctx, &agentvmv1.GetInfoRequest{})
		require.Equal(t, codes.Unauthenticated, status.Code(err), name)
	}
	_, err := agentvmv1.NewAgentsClient(a.conn).Step(t.Context(), &agentvmv1.StepRequest{RunId: "r", Step: 1})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	stream, err := agentvmv1.NewSessionClient(a.conn).Exec(t.Context(), &agentvmv1.ExecRequest{Command: "touch pwned"})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.Equal(t, codes.Unauthenticated, status.Code(err))
}

func TestServerInfoAnswersTheVersion(t *testing.T) {
	a := startAgent(t)
	resp, err := agentvmv1.NewInfoClient(a.conn).Get(withCredential(t.Context(), testCredential), &agentvmv1.GetInfoRequest{})
	require.NoError(t, err)
	require.Equal(t, agentvm.Version, resp.Version)
	require.Equal(t, []string{"step", "exec", "process", "files", "state", "tool:shell", "tool:read_file", "tool:write_file", "tool:list_dir"}, resp.Capabilities)
	require.Empty(t, resp.WindowManager, "no desktop, no window manager")

	a = startAgent(t, func(c *agentvm.Config) { c.MCP = true })
	resp, err = agentvmv1.NewInfoClient(a.conn).Get(withCredential(t.Context(), testCredential), &agentvmv1.GetInfoRequest{})
	require.NoError(t, err)
	require.Contains(t, resp.Capabilities, "mcp")
}

func TestServerStepIsAnsweredFromTheJournalWhenRetried(t *testing.T) {
	a := startAgent(t)
	srv := modeltest.NewServer(t, testKey,
		modeltest.Calls(modeltest.Call("write_file", `{"path":"out.txt","content":"hi"}`)),
		modeltest.Reply("Done."))
	agents := agentvmv1.NewAgentsClient(a.conn)
	ctx := withCredential(t.Context(), testCredential)

	req := stepRequest(srv, agentvm.ProviderAnthropic, 1, nil)
	first, err := agents.Step(ctx, req)
	require.NoError(t, err)
	require.False(t, first.Replayed)
	require.Len(t, first.ToolCalls, 1)

	again, err := agents.Step(ctx, req)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.Messages, again.Messages)
	require.EqualValues(t, 1, a.calls.Load())

	last, err := agents.Step(ctx, stepRequest(srv, agentvm.ProviderAnthropic, 2, first.Messages))
	require.NoError(t, err)
	require.True(t, last.Done)
	require.Equal(t, "Done.", last.Text)

	_, err = agents.Step(ctx, &agentvmv1.StepRequest{RunId: "r", Step: 0})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
}

func TestServerCancelStopsAStep(t *testing.T) {
	a := startAgent(t)
	srv := modeltest.NewServer(t, testKey, modeltest.Calls(modeltest.Call("shell", `{"command":"sleep 30"}`)))
	agents := agentvmv1.NewAgentsClient(a.conn)
	ctx := withCredential(t.Context(), testCredential)

	errc := make(chan error, 1)
	go func() {
		_, err := agents.Step(ctx, stepRequest(srv, agentvm.ProviderOpenAI, 1, nil))
		errc <- err
	}()
	require.Eventually(t, func() bool {
		resp, err := agents.Cancel(ctx, &agentvmv1.CancelRequest{RunId: "run-1"})
		return err == nil && resp.Cancelled
	}, 10*time.Second, 20*time.Millisecond)
	select {
	case err := <-errc:
		require.Equal(t, codes.Canceled, status.Code(err), err)
	case <-time.After(10 * time.Second):
		t.Fatal("step not cancelled")
	}
	resp, err := agents.Cancel(ctx, &agentvmv1.CancelRequest{RunId: "run-1"})
	require.NoError(t, err)
	require.False(t, resp.Cancelled)
}

func TestServerExecStreamsOutputAndExitCode(t *testing.T) {
	a := startAgent(t)
	ctx := withCredential(t.Context(), testCredential)
	stream, err := agentvmv1.NewSessionClient(a.conn).Exec(ctx, &agentvmv1.ExecRequest{
		Command: `echo "$GREETING"; echo oops >&2; exit 4`, Env: map[string]string{"GREETING": "hello"},
	})
	require.NoError(t, err)
	var stdout, stderr []byte
	var last *agentvmv1.ExecOutput
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		stdout = append(stdout, msg.Stdout...)
		stderr = append(stderr, msg.Stderr...)
		last = msg
	}
	require.Equal(t, "hello\n", string(stdout))
	require.Equal(t, "oops\n", string(stderr))
	require.True(t, last.Exited)
	require.EqualValues(t, 4, last.ExitCode)

	stream, err = agentvmv1.NewSessionClient(a.conn).Exec(ctx, &agentvmv1.ExecRequest{Command: "sleep 30", TimeoutSeconds: 1})
	require.NoError(t, err)
	msg, err := stream.Recv()
	require.NoError(t, err)
	require.True(t, msg.Exited)
	require.EqualValues(t, -1, msg.ExitCode)
}
