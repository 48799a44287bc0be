package devstack_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// TestCaddyInFront: deploy/caddy/Caddyfile, run by Debian's Caddy with a certificate from a CA
// the test makes, terminates TLS in front of the API, and every surface works through it: gRPC
// (h2c upstream), Connect/JSON, the desktop WebSocket (an RFB handshake with the box's Xvnc) and
// MCP. `caddy validate` accepts the file as shipped.
func TestCaddyInFront(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	bin, err := exec.LookPath("caddy")
	if err != nil {
		t.Fatal("caddy is not installed: run make deps")
	}
	caddyfile, err := filepath.Abs(filepath.Join("..", "..", "deploy", "caddy", "Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	caddyEnv := []string{"HOME=" + home, "XDG_DATA_HOME=" + home, "XDG_CONFIG_HOME=" + home, "PATH=" + os.Getenv("PATH")}
	out, err := exec.Command(bin, "validate", "--config", caddyfile, "--adapter", "caddyfile").CombinedOutput()
	if err != nil || strings.Contains(string(out), `"level":"warn"`) {
		t.Fatalf("caddy validate: %v\n%s", err, out)
	}

	cfg := boxConfig(t)
	cfg.Template = "desktop"
	e := newDesktopEnv(t, cfg, 5*time.Minute)
	pool, certFile, keyFile := testCA(t, home)
	port := startCaddy(t, e.ctx, bin, caddyfile, append(caddyEnv,
		"COCOONBOX_DOMAIN=localhost",
		"COCOONBOX_PREVIEW_DOMAIN=preview.localhost",
		"COCOONBOX_API="+strings.TrimPrefix(e.d.URLs().API, "http://"),
		"COCOONBOX_TLS=tls "+certFile+" "+keyFile,
	))
	origin := "https://localhost:" + port
	tlsConf := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	httpc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: tlsConf}}

	// gRPC: a unary call and the desktop ticket the WebSocket below uses.
	conn, err := grpc.NewClient("localhost:"+port, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	authed := metadata.AppendToOutgoingContext(e.ctx, "authorization", "Bearer "+e.token)
	boxes := cbv1.NewBoxServiceClient(conn)
	got, err := boxes.GetBox(authed, &cbv1.GetBoxRequest{Box: string(e.id)})
	if err != nil || got.GetId() != string(e.id) {
		t.Fatalf("gRPC GetBox through Caddy: %v, %v", got, err)
	}

	// Connect/JSON, as a browser sends it.
	req, err := http.NewRequestWithContext(e.ctx, http.MethodPost, origin+"/cocoonbox.v1.BoxService/GetBox",
		strings.NewReader(fmt.Sprintf(`{"box":%q}`, e.id)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("Connect GetBox through Caddy: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var box struct{ ID string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &box) != nil || box.ID != string(e.id) {
		t.Fatalf("Connect GetBox through Caddy: %s %s", resp.Status, body)
	}

	// The desktop: a WebSocket upgrade through Caddy to the edge, then RFB from the box's Xvnc.
	tk, err := boxes.DesktopTicket(authed, &cbv1.DesktopTicketRequest{Box: string(e.id)})
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := websocket.Dial(e.ctx, "wss://localhost:"+port+tk.GetUrl(),
		&websocket.DialOptions{HTTPClient: httpc, Subprotocols: []string{"binary"}})
	if err != nil {
		t.Fatalf("desktop WebSocket through Caddy: %v", err)
	}
	ws.SetReadLimit(1 << 20)
	nc := websocket.NetConn(e.ctx, ws, websocket.MessageBinary)
	rfb, err := rfbHandshake(nc)
	if err != nil {
		t.Fatalf("RFB through Caddy: %v", err)
	}
	if _, err := rfb.frame(); err != nil {
		t.Fatalf("first frame through Caddy: %v", err)
	}
	_ = nc.Close()

	// MCP (Streamable HTTP): the tools and a call of one.
	mc, err := mcpclient.NewStreamableHttpClient(origin+"/mcp", transport.WithHTTPBasicClient(httpc),
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + e.token}))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if err := mc.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "caddy-test", Version: "0"}
	if _, err := mc.Initialize(e.ctx, init); err != nil {
		t.Fatalf("MCP initialize through Caddy: %v", err)
	}
	var call mcp.CallToolRequest
	call.Params.Name = "box_list"
	res, err := mc.CallTool(e.ctx, call)
	if err != nil || res.IsError || !strings.Contains(fmt.Sprint(res.Content), string(e.id)) {
		t.Fatalf("MCP box_list through Caddy: %v, %v", res, err)
	}
}

// startCaddy runs `caddy run` on caddyfile with env (its ports picked here) until the test ends,
// and returns the HTTPS port once it answers.
func startCaddy(t *testing.T, ctx context.Context, bin, caddyfile string, env []string) string {
	t.Helper()
	https, httpPort, admin := freePort(t), freePort(t), freePort(t)
	cmd := exec.Command(bin, "run", "--config", caddyfile, "--adapter", "caddyfile")
	cmd.Env = append(env, "CADDY_HTTPS_PORT="+https, "CADDY_HTTP_PORT="+httpPort, "CADDY_ADMIN_PORT="+admin)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("caddy:\n%s", logs.String())
		}
	})
	err := testutil.Poll(ctx, testutil.WaitShort, func() error {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+https, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err
	})
	if err != nil {
		t.Fatalf("caddy did not listen on %s: %v\n%s", https, err, logs.String())
	}
	return https
}

// freePort is a loopback TCP port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// testCA makes a CA and a certificate it signed for localhost (and the preview hosts under
// preview.localhost), written as PEM files under dir, and returns the pool that trusts it.
func testCA(t *testing.T, dir string) (pool *x509.CertPool, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cocoonbox test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost", "*.preview.localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, certFile, keyFile
}
