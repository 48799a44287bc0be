package devstack_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/devstack"
	"github.com/loomhand/cocoonbox/internal/testutil"
	cbv1 "github.com/loomhand/cocoonbox/proto/cocoonbox/v1"
)

// portServer is a web server for the box's port 8000 in the base image's Python (which has
// sockets, not http.server): each connection's request line comes back in the body.
const portServer = `import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8000))
s.listen(16)
while True:
    c, _ = s.accept()
    d = b""
    while b"\r\n\r\n" not in d:
        chunk = c.recv(4096)
        if not chunk:
            break
        d += chunk
    auth = b" with a credential" if b"\r\nauthorization:" in d.lower() or b"cocoonbox_preview=" in d else b""
    c.sendall(b"HTTP/1.0 200 OK\r\nSet-Cookie: s=1\r\n\r\nthe box got " + d.split(b"\r\n")[0] + auth)
    c.close()
`

// TestBoxPort: a web server started in the box on port 8000 is reachable through the ports edge
// (what `cocoonbox box port` tunnels to) by its owner and by a viewer; a stranger gets 404, no
// token 401, the agent's port and a port out of range 400, and a port where nothing listens says
// so.
func TestBoxPort(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, _ := newBoxEnv(t, boxConfig(t), 4*time.Minute)
	v, err := d.Boxes.Create(ctx, owner.ID, boxsvc.CreateRequest{Name: "site", Size: cocoonbox.SizeSmall})
	if err != nil {
		t.Fatal(err)
	}
	id := v.BoxID
	// Standard input reaches a command in a real box (the engine and gVisor's init).
	if res, err := d.Boxes.Exec(ctx, owner.ID, id, boxsvc.ExecRequest{Argv: []string{"wc", "-c"}, Stdin: []byte("hello, box")}); err != nil || strings.TrimSpace(res.Stdout) != "10" {
		t.Fatalf("wc -c with stdin: %+v %v", res, err)
	}
	if _, err := d.Boxes.Exec(ctx, owner.ID, id, boxsvc.ExecRequest{
		Argv: []string{"sh", "-c", `python3 -c "$SRV" >/dev/null 2>&1 &`}, Env: map[string]string{"SRV": portServer},
	}); err != nil {
		t.Fatal(err)
	}
	cli, err := config.LoadCLI(d.Bootstrap().CLIConfig, config.MapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	e := apiEnv{d: d}
	viewer, viewerTok := e.user(ctx, t, "vic")
	if _, err := d.Store.PutShare(ctx, id, viewer.ID, cocoonbox.RoleViewer, nil); err != nil {
		t.Fatal(err)
	}
	_, strangerTok := e.user(ctx, t, "stranger")
	base := strings.Replace(d.URLs().API, "http://", "ws://", 1) + "/v1/boxes/" + string(id) + "/ports/"
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

	var got string
	testutil.Eventually(t, testutil.WaitShort, "the box's server to answer through the edge", func() bool {
		got = portGet(ctx, t, base+"8000", bearer(cli.Token))
		return strings.Contains(got, "the box got GET /hello")
	})
	ports, err := d.Boxes.ListPorts(ctx, viewer.ID, id)
	if err != nil || !slices.Contains(ports, 8000) || slices.Contains(ports, 7070) {
		t.Errorf("ListPorts: %v %v, want 8000 and not the agent's 7070", ports, err)
	}
	if got := portGet(ctx, t, base+"8000", bearer(viewerTok)); !strings.Contains(got, "the box got GET /hello") {
		t.Errorf("a viewer through the edge: %q", got)
	}
	expectHTTP(ctx, t, base+"8000", bearer(strangerTok), http.StatusNotFound)
	expectHTTP(ctx, t, base+"8000", nil, http.StatusUnauthorized)
	for port, want := range map[string]string{"7070": "the box agent's own port", "0": "must be 1 to 65535", "x": "must be a number"} {
		if body := expectHTTP(ctx, t, base+port, bearer(cli.Token), http.StatusBadRequest); !strings.Contains(body, want) {
			t.Errorf("port %s: %s, want %q", port, body, want)
		}
	}
	if body := expectHTTP(ctx, t, base+"8001", bearer(cli.Token), http.StatusServiceUnavailable); !strings.Contains(body, "port 8001 is not answering") {
		t.Errorf("a port where nothing listens: %s", body)
	}

	// The preview: the same port over HTTP, the caller's credential kept from the box, every
	// answer sandboxed away from the API's origin.
	preview := d.URLs().API + "/v1/boxes/" + string(id) + "/ports/8000/"
	status, body, hdr := previewGet(ctx, t, preview+"hello?x=1", cli.Token)
	if status != http.StatusOK || body != "the box got GET /hello?x=1 HTTP/1.1" {
		t.Fatalf("preview as the owner: %d %q", status, body)
	}
	if !strings.HasPrefix(hdr.Get("Content-Security-Policy"), "sandbox") || hdr.Get("Set-Cookie") != "" {
		t.Errorf("preview headers: CSP %q, Set-Cookie %q", hdr.Get("Content-Security-Policy"), hdr.Get("Set-Cookie"))
	}
	if status, body, _ := previewGet(ctx, t, preview, viewerTok); status != http.StatusOK || !strings.HasPrefix(body, "the box got GET / ") {
		t.Errorf("preview as a viewer: %d %q", status, body)
	}
	if status, _, _ := previewGet(ctx, t, preview, strangerTok); status != http.StatusNotFound {
		t.Errorf("preview as a stranger: %d, want 404", status)
	}
	// A hibernated box's preview wakes it for its owner (the server in it runs on).
	if _, err := d.Boxes.Hibernate(ctx, owner.ID, id); err != nil {
		t.Fatal(err)
	}
	if status, body, _ := previewGet(ctx, t, preview+"again", cli.Token); status != http.StatusOK || !strings.Contains(body, "GET /again") {
		t.Errorf("preview of the hibernated box: %d %q", status, body)
	}
	testPreviewHost(ctx, t, d, id, cli.Token, viewerTok, strangerTok)
}

// testPreviewHost: the port's preview on its own host, as a browser reaches it: a preview ticket
// becomes a session cookie for that host (once), which opens the box's server there without the
// box seeing it; without it nothing opens until the owner makes the port public, and a viewer
// may not; a stranger gets no ticket.
func testPreviewHost(ctx context.Context, t *testing.T, d *devstack.Dev, id cocoonbox.BoxID, ownerTok, viewerTok, strangerTok string) {
	conn, err := grpc.NewClient(strings.TrimPrefix(d.URLs().API, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := cbv1.NewBoxServiceClient(conn)
	as := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}
	tk, err := api.DesktopTicket(as(ownerTok), &cbv1.DesktopTicketRequest{Box: string(id), PreviewPort: 8000})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse("http:" + tk.GetUrl())
	if err != nil || !strings.HasPrefix(u.Host, "p8000-"+strings.TrimPrefix(string(id), "bx_")+".localhost:") {
		t.Fatalf("preview ticket url %q", tk.GetUrl())
	}
	if _, err := api.DesktopTicket(as(strangerTok), &cbv1.DesktopTicketRequest{Box: string(id), PreviewPort: 8000}); status.Code(err) != codes.NotFound {
		t.Errorf("a stranger's preview ticket: %v", err)
	}
	// Every request goes to the API's own address with the preview host in Host, as a browser
	// resolving *.localhost sends it.
	get := func(path string, cookie *http.Cookie) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.URLs().API+path, nil)
		req.Host = u.Host
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	body := func(resp *http.Response) string { b, _ := io.ReadAll(resp.Body); return string(b) }
	resp := get(u.RequestURI(), nil)
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "cocoonbox_preview" {
			session = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || session == nil || !session.HttpOnly || session.SameSite != http.SameSiteLaxMode {
		t.Fatalf("the ticket: %d to %q, cookie %+v", resp.StatusCode, resp.Header.Get("Location"), session)
	}
	if resp := get(u.RequestURI(), nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the ticket again: %d, want 401", resp.StatusCode)
	}
	resp = get("/app?x=1", session)
	if got := body(resp); resp.StatusCode != http.StatusOK || got != "the box got GET /app?x=1 HTTP/1.1" {
		t.Errorf("with the session: %d %q (the box must not see the cookie)", resp.StatusCode, got)
	}
	if resp.Header.Get("Set-Cookie") != "s=1" || resp.Header.Get("Content-Security-Policy") != "" {
		t.Errorf("on its own host the box's page is its origin: Set-Cookie %q, CSP %q", resp.Header.Get("Set-Cookie"), resp.Header.Get("Content-Security-Policy"))
	}
	if resp := get("/", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no session, private port: %d, want 401", resp.StatusCode)
	}
	if _, err := api.SetPortPublic(as(viewerTok), &cbv1.SetPortPublicRequest{Box: string(id), Port: 8000, Public: true}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a viewer making the port public: %v", err)
	}
	if p, err := api.SetPortPublic(as(ownerTok), &cbv1.SetPortPublicRequest{Box: string(id), Port: 8000, Public: true}); err != nil || !p.GetPublic() {
		t.Fatalf("the owner making the port public: %v %v", p, err)
	}
	if resp := get("/open", nil); resp.StatusCode != http.StatusOK || !strings.Contains(body(resp), "GET /open") {
		t.Errorf("a public port without a session: %d", resp.StatusCode)
	}
	if ports, err := api.ListPorts(as(viewerTok), &cbv1.ListPortsRequest{Box: string(id)}); err != nil || len(ports.GetPorts()) == 0 || !ports.GetPorts()[0].GetPublic() || ports.GetPorts()[0].GetPreviewHost() != u.Host {
		t.Errorf("ListPorts after: %v %v", ports, err)
	}
	if _, err := api.SetPortPublic(as(ownerTok), &cbv1.SetPortPublicRequest{Box: string(id), Port: 8000, Public: false}); err != nil {
		t.Fatal(err)
	}
	if resp := get("/", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("private again: %d, want 401", resp.StatusCode)
	}
}

// previewGet GETs url with the bearer token and returns the status, body and headers.
func previewGet(ctx context.Context, t *testing.T, url, token string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("preview %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// portGet sends one HTTP request through the ports edge at url and returns the whole answer,
// or the error's text when the edge refused (Eventually retries on it).
func portGet(ctx context.Context, t *testing.T, url string, h http.Header) string {
	t.Helper()
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"binary"}, HTTPHeader: h})
	if err != nil {
		if resp != nil {
			b, _ := io.ReadAll(resp.Body)
			return resp.Status + " " + string(b)
		}
		return err.Error()
	}
	defer ws.CloseNow()
	nc := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	if _, err := io.WriteString(nc, "GET /hello HTTP/1.0\r\n\r\n"); err != nil {
		return err.Error()
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(nc)
	if err != nil && len(b) == 0 {
		return err.Error()
	}
	return string(b)
}
