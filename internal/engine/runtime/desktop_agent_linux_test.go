package runtime

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/internal/testutil"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// The resident agent as the desktop image's boot hook starts it (image/desktop/boot.sh).
const (
	agentPort           = 7070
	agentCredentialFile = "/run/cocoonbox/agent-credential"
)

// TestGVisorDesktopAgentSurvivesHibernate boots a box from the desktop image, whose boot hook
// starts cocoonbox-agent beside the desktop, reaches the agent's gRPC API through the ports
// relay, and checks the credential the control plane writes after boot, Exec, and that the same
// agent answers after hibernate and wake. Like every runtime test it fails, never skips, when the
// image is not built.
func TestGVisorDesktopAgentSurvivesHibernate(t *testing.T) {
	t0 := time.Now()
	e, b := startDesktopBox(t)

	// Before the control plane writes the credential, the agent is up and refuses everyone.
	conn := dialAgent(t, e, b.ID)
	_, err := agentvmv1.NewInfoClient(conn).Get(t.Context(), &agentvmv1.GetInfoRequest{})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "no credential yet") {
		t.Fatalf("Info before the credential: %v, want UNAUTHENTICATED no credential yet", err)
	}
	t.Logf("boot to an answering agent: %v", time.Since(t0))

	const cred = "box-credential-7f3a"
	e.sh(t, b.ID, "umask 077 && mkdir -p /run/cocoonbox && printf '%s\\n' "+cred+" >"+agentCredentialFile)
	info := checkAgentInfo(t, conn, cred)
	for _, want := range []string{"tool:shell", "tool:browser_open", "tool:desktop_click", "tool:desktop_screenshot"} {
		if !slices.Contains(info.GetCapabilities(), want) {
			t.Errorf("capabilities %v lack %s", info.GetCapabilities(), want)
		}
	}
	if got := agentExec(t, conn, cred, "echo hi"); got != "hi\n" {
		t.Fatalf("Exec echo hi: stdout %q", got)
	}
	// The agent's tools run as root on the desktop's display, which Xvnc serves as user.
	var geometry string
	testutil.Eventually(t, testutil.WaitLong, "the display to answer the agent", func() bool {
		out, _, _, _ := e.exec(b.ID, "pgrep", "-x", "Xvnc")
		if strings.TrimSpace(out) == "" {
			geometry = "no Xvnc yet"
			return false
		}
		geometry = agentExecOutput(t, conn, cred, "xdotool getdisplaygeometry 2>&1")
		return strings.TrimSpace(geometry) == "1280 800"
	}, &geometry)
	// The agent tells when XFCE's window manager manages the display (windows mapped before
	// then stay invisible): what its browser waits for before opening a window.
	var wm string
	testutil.Eventually(t, testutil.WaitLong, "the agent to report the window manager", func() bool {
		wm = checkAgentInfo(t, conn, cred).GetWindowManager()
		return wm != ""
	}, &wm)
	t.Logf("boot to a managed display: %v", time.Since(t0))
	if !strings.EqualFold(wm, "xfwm4") {
		t.Fatalf("window manager %q, want Xfwm4", wm)
	}
	var pid string
	testutil.Eventually(t, testutil.WaitLong, "the agent's pid", func() bool {
		out, _, _, _ := e.exec(b.ID, "pgrep", "-u", "root", "-x", "cocoonbox-agent")
		pid = strings.TrimSpace(out)
		return pid != "" && !strings.Contains(pid, "\n")
	}, &pid)
	_ = conn.Close() // an open relay would keep the box from hibernating

	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitLong)
	defer cancel()
	t1 := time.Now()
	if err := e.rt.Hibernate(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	t2 := time.Now()
	if err := e.rt.Wake(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	t.Logf("hibernate %v, wake %v", t2.Sub(t1), time.Since(t2))

	// The same agent, not a restarted one, with the credential it had read.
	conn = dialAgent(t, e, b.ID)
	defer func() { _ = conn.Close() }()
	if got := checkAgentInfo(t, conn, cred).GetWindowManager(); got != wm {
		t.Fatalf("window manager after wake %q, before %q", got, wm)
	}
	if out, _, _, _ := e.exec(b.ID, "pgrep", "-u", "root", "-x", "cocoonbox-agent"); strings.TrimSpace(out) != pid {
		t.Fatalf("agent pid after wake %q, before %q", strings.TrimSpace(out), pid)
	}
	if got := agentExec(t, conn, cred, "echo hi"); got != "hi\n" {
		t.Fatalf("Exec echo hi after wake: stdout %q", got)
	}
}

// dialAgent waits for the agent to listen on its port in the box, then returns a gRPC client
// whose connections go through the runtime's ports relay.
func dialAgent(t *testing.T, e *testEnv, id string) *grpc.ClientConn {
	t.Helper()
	var last string
	testutil.Eventually(t, testutil.WaitLong, "the agent to listen on port 7070", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitShort)
		defer cancel()
		c, err := e.rt.Dial(ctx, id, agentPort)
		if err != nil {
			last = err.Error()
			if !errors.Is(err, ErrPortClosed) {
				t.Fatalf("dial %d: %v", agentPort, err)
			}
			return false
		}
		_ = c.Close()
		return true
	}, &last)
	conn, err := grpc.NewClient("passthrough:///cocoonbox-agent",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return e.rt.Dial(ctx, id, agentPort)
		}))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func withAgentCredential(ctx context.Context, cred string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+cred)
}

// checkAgentInfo checks that Info answers the agent's version with the credential and refuses
// a call without it.
func checkAgentInfo(t *testing.T, conn *grpc.ClientConn, cred string) *agentvmv1.InfoResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testutil.WaitShort)
	defer cancel()
	client := agentvmv1.NewInfoClient(conn)
	info, err := client.Get(withAgentCredential(ctx, cred), &agentvmv1.GetInfoRequest{})
	if err != nil {
		t.Fatalf("Info with the credential: %v", err)
	}
	if info.GetVersion() != agentvm.Version {
		t.Fatalf("Info version %q, want %q", info.GetVersion(), agentvm.Version)
	}
	if _, err := client.Get(ctx, &agentvmv1.GetInfoRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Info without the credential: %v, want UNAUTHENTICATED", err)
	}
	return info
}

// agentExec runs command through Session.Exec and returns its stdout; it must exit 0.
func agentExec(t *testing.T, conn *grpc.ClientConn, cred, command string) string {
	t.Helper()
	out, code := agentExecCode(t, conn, cred, command)
	if code != 0 {
		t.Fatalf("Exec %q: exit code %d, stdout %q", command, code, out)
	}
	return out
}

// agentExecOutput runs command through Session.Exec and returns its stdout, whatever its exit.
func agentExecOutput(t *testing.T, conn *grpc.ClientConn, cred, command string) string {
	t.Helper()
	out, _ := agentExecCode(t, conn, cred, command)
	return out
}

func agentExecCode(t *testing.T, conn *grpc.ClientConn, cred, command string) (string, int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testutil.WaitShort)
	defer cancel()
	stream, err := agentvmv1.NewSessionClient(conn).Exec(withAgentCredential(ctx, cred), &agentvmv1.ExecRequest{Command: command})
	if err != nil {
		t.Fatalf("Exec %q: %v", command, err)
	}
	var stdout strings.Builder
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			t.Fatalf("Exec %q: stream ended without an exit", command)
		}
		if err != nil {
			t.Fatalf("Exec %q: %v", command, err)
		}
		stdout.Write(msg.GetStdout())
		if msg.GetExited() {
			return stdout.String(), msg.GetExitCode()
		}
	}
}
