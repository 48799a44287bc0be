package devstack

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/api/historyservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/loomhand/cocoonbox/internal/testutil"
)

// TestTemporalRefusesCallersWithoutCredential: whoever reaches the frontend, or one of the
// internal services' loopback ports, without the data dir's client certificate cannot start a
// workflow, list workflows or read a history.
func TestTemporalRefusesCallersWithoutCredential(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tp, _ := startTestTemporal(ctx, t, TemporalOptions{DataDir: t.TempDir(), UIPort: NoUI})
	c := dialTest(t, tp)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "owned", TaskQueue: testTaskQueue}, "Greet", "box")
	if err != nil {
		t.Fatalf("start workflow with the credential: %v", err)
	}
	owned := &commonpb.WorkflowExecution{WorkflowId: "owned", RunId: run.GetRunID()}
	ns, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: tp.Namespace()})
	if err != nil {
		t.Fatal(err)
	}

	for _, caller := range []struct {
		name  string
		creds credentials.TransportCredentials
	}{
		{"plain gRPC", insecure.NewCredentials()},
		// TLS that trusts the server, but has no client certificate to show.
		{"TLS without a client certificate", credentials.NewTLS(&tls.Config{RootCAs: tp.tls.pool, ServerName: TemporalServerName})},
		// A client certificate, but from a CA of its own making.
		{"a certificate from another CA", credentials.NewTLS(&tls.Config{
			RootCAs: tp.tls.pool, ServerName: TemporalServerName, Certificates: []tls.Certificate{otherCA(t).client},
		})},
	} {
		t.Run(caller.name, func(t *testing.T) {
			wf := workflowservice.NewWorkflowServiceClient(conn(t, tp.Address(), caller.creds))
			if _, err := wf.StartWorkflowExecution(ctx, &workflowservice.StartWorkflowExecutionRequest{
				Namespace: tp.Namespace(), WorkflowId: "intruder", RequestId: "intruder",
				WorkflowType: &commonpb.WorkflowType{Name: "Greet"}, TaskQueue: &taskqueuepb.TaskQueue{Name: testTaskQueue},
			}); err == nil {
				t.Errorf("frontend: start workflow succeeded")
			}
			if resp, err := wf.ListWorkflowExecutions(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: tp.Namespace()}); err == nil {
				t.Errorf("frontend: list workflows returned %d executions", len(resp.GetExecutions()))
			}
			if _, err := wf.GetWorkflowExecutionHistory(ctx, &workflowservice.GetWorkflowExecutionHistoryRequest{
				Namespace: tp.Namespace(), Execution: owned,
			}); err == nil {
				t.Errorf("frontend: read a history succeeded")
			}

			// The internal services take the same client certificate: their ports are not a
			// way around the frontend.
			history := historyservice.NewHistoryServiceClient(conn(t, loopbackPort(tp.ports.history), caller.creds))
			if _, err := history.GetWorkflowExecutionHistory(ctx, &historyservice.GetWorkflowExecutionHistoryRequest{
				NamespaceId: ns.GetNamespaceInfo().GetId(),
				Request:     &workflowservice.GetWorkflowExecutionHistoryRequest{Namespace: tp.Namespace(), Execution: owned},
			}); err == nil {
				t.Errorf("history service: read a history succeeded")
			}
			for name, port := range map[string]int{"matching": tp.ports.matching, "worker": tp.ports.worker} {
				if _, err := healthpb.NewHealthClient(conn(t, loopbackPort(port), caller.creds)).Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
					t.Errorf("%s service: a call succeeded", name)
				}
			}
		})
	}
	if _, err := c.DescribeWorkflowExecution(ctx, "intruder", ""); err == nil {
		t.Errorf("a workflow started without the credential exists")
	}

	// With the credential, the same calls work, on the internal services too.
	mine := credentials.NewTLS(tp.tls.clientConfig())
	wf := workflowservice.NewWorkflowServiceClient(conn(t, tp.Address(), mine))
	if err := testutil.Poll(ctx, 0, func() error {
		list, err := wf.ListWorkflowExecutions(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: tp.Namespace()})
		if err == nil && len(list.GetExecutions()) != 1 {
			err = fmt.Errorf("%d executions, want 1", len(list.GetExecutions()))
		}
		return err
	}); err != nil {
		t.Errorf("list workflows with the credential: %v", err)
	}
	internal := credentials.NewTLS(tp.tls.dialConfig(tp.tls.server))
	for name, port := range map[string]int{"history": tp.ports.history, "matching": tp.ports.matching, "worker": tp.ports.worker} {
		if _, err := healthpb.NewHealthClient(conn(t, loopbackPort(port), internal)).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("%s service with the server certificate: %v", name, err)
		}
	}
}

// TestTemporalCertificatesPersist: a restart keeps the CA, so clients holding the client
// certificate keep working; a damaged set is made again rather than failing the start.
func TestTemporalCertificatesPersist(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	first, err := loadOrCreateTLS(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	again, err := loadOrCreateTLS(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	if !again.client.Leaf.Equal(first.client.Leaf) {
		t.Errorf("a second start made new certificates")
	}
	for _, f := range []string{serverKeyFile, clientKeyFile} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", f, fi.Mode(), err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, clientCertFile), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	remade, err := loadOrCreateTLS(dir, now)
	if err != nil {
		t.Fatalf("load over a damaged certificate: %v", err)
	}
	if remade.client.Leaf.Equal(first.client.Leaf) {
		t.Errorf("a damaged client certificate was kept")
	}
	if _, err := loadOrCreateTLS(dir, now.Add(certLifetime)); err != nil {
		t.Fatalf("load near expiry: %v", err)
	}
	if late, _ := loadOrCreateTLS(dir, now.Add(certLifetime)); late.client.Leaf.NotAfter.Before(now.Add(certLifetime)) {
		t.Errorf("certificates near expiry were not renewed")
	}
}

// TestTemporalUIRefusesWithoutLogin: the Web UI holds a credential for the frontend, so it must
// not serve a caller who has not logged in.
func TestTemporalUIRefusesWithoutLogin(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tp, _ := startTestTemporal(ctx, t, TemporalOptions{DataDir: t.TempDir()})
	c := dialTest(t, tp)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "owned", TaskQueue: testTaskQueue}, "Greet", "box")
	if err != nil {
		t.Fatal(err)
	}
	ns := tp.Namespace()
	paths := []string{
		"/api/v1/namespaces/" + ns + "/workflows",
		"/api/v1/namespaces/" + ns + "/workflows/owned/history?execution.runId=" + run.GetRunID(),
		"/api/v1/namespaces/" + ns + "/workflows/owned/run/" + run.GetRunID() + "/history.json",
		"/",
	}
	for _, path := range paths {
		if code := httpStatus(ctx, t, http.DefaultClient, tp.UIURL()+path); code != http.StatusUnauthorized {
			t.Errorf("GET ui %s without login = %d, want 401", path, code)
		}
	}
	// A write (terminate) without login: refused, and the workflow still runs.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost,
		tp.UIURL()+"/api/v1/namespaces/"+ns+"/workflows/owned/terminate", strings.NewReader(`{"reason":"x"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST terminate without login = %d, want 401", resp.StatusCode)
	}
	for _, token := range []string{"", "wrong"} {
		if code := login(ctx, t, tp, http.DefaultClient, token); code != http.StatusUnauthorized {
			t.Errorf("login with %q = %d, want 401", token, code)
		}
	}
	bearer, _ := http.NewRequestWithContext(ctx, http.MethodGet, tp.UIURL()+paths[0], nil)
	bearer.Header.Set("Authorization", "Bearer wrong")
	if resp, err := http.DefaultClient.Do(bearer); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET with a wrong bearer token: %v, %v; want 401", resp, err)
	}

	ui := uiSession(ctx, t, tp)
	for _, path := range paths {
		if code := httpStatus(ctx, t, ui, tp.UIURL()+path); code != http.StatusOK {
			t.Errorf("GET ui %s after login = %d, want 200", path, code)
		}
	}
	desc, err := c.DescribeWorkflowExecution(ctx, "owned", run.GetRunID())
	if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Errorf("workflow after the refused terminate: %v, %v; want running", desc.GetWorkflowExecutionInfo().GetStatus(), err)
	}
}

// TestTemporalInsecureOnlyOnLoopback: the opt-out of auth cannot be combined with a frontend
// other machines reach.
func TestTemporalInsecureOnlyOnLoopback(t *testing.T) {
	_, err := StartTemporal(t.Context(), TemporalOptions{DataDir: t.TempDir(), Host: "0.0.0.0", Insecure: true})
	if err == nil || !strings.Contains(err.Error(), "insecure frontend must listen on loopback, not 0.0.0.0") {
		t.Errorf("insecure on 0.0.0.0: err = %v", err)
	}
}

// uiSession logs in to tp's UI with the token from its data dir and returns a client carrying
// the cookie.
func uiSession(ctx context.Context, t *testing.T, tp *Temporal) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar}
	token, err := os.ReadFile(tp.UITokenPath())
	if err != nil {
		t.Fatal(err)
	}
	if code := login(ctx, t, tp, c, string(token)); code != http.StatusOK {
		t.Fatalf("login with the token = %d, want 200 (after the redirect)", code)
	}
	return c
}

func login(ctx context.Context, t *testing.T, tp *Temporal, c *http.Client, token string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tp.UIURL()+uiLoginPath,
		strings.NewReader(url.Values{"token": {token}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// otherCA makes a CA and client certificate the server has never seen.
func otherCA(t *testing.T) *serverTLS {
	t.Helper()
	s, err := loadOrCreateTLS(t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// conn is a gRPC connection to addr with creds, closed at cleanup.
func conn(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func loopbackPort(port int) string { return net.JoinHostPort(loopback, strconv.Itoa(port)) }
