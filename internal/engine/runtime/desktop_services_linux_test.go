package runtime

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/testutil"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// TestGVisorDesktopAgentServices boots a desktop box and drives the resident agent's Desktop and
// State services through the ports relay, as the control plane does: a screenshot of the XFCE
// desktop, the pointer moved and read back with xdotool, a key pressed, the home directory
// measured and exported; and the in-box MCP endpoint (7072) listing the agent's tools.
func TestGVisorDesktopAgentServices(t *testing.T) {
	e, b := startDesktopBox(t)
	conn := dialAgent(t, e, b.ID)
	defer func() { _ = conn.Close() }()
	const cred = "box-credential-desk"
	e.sh(t, b.ID, "umask 077 && mkdir -p /run/cocoonbox && printf '%s\\n' "+cred+" >"+agentCredentialFile)
	info := checkAgentInfo(t, conn, cred)
	for _, want := range []string{"desktop", "state", "mcp"} {
		if !slices.Contains(info.GetCapabilities(), want) {
			t.Errorf("capabilities %v lack %s", info.GetCapabilities(), want)
		}
	}

	t.Run("screenshot", func(t *testing.T) { checkScreenshot(t, conn, cred) })
	t.Run("move and key", func(t *testing.T) { checkPointer(t, conn, cred) })
	t.Run("state", func(t *testing.T) { checkHomeState(t, conn, cred) })
	t.Run("mcp", func(t *testing.T) { checkInBoxMCP(t, e, b.ID) })
}

// checkScreenshot polls Desktop.Screenshot until XFCE has drawn something: a 1280x800 PNG that is
// not all black.
func checkScreenshot(t *testing.T, conn *grpc.ClientConn, cred string) {
	desk := agentvmv1.NewDesktopClient(conn)
	var last string
	testutil.Eventually(t, testutil.WaitLong, "a screenshot of the XFCE desktop", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), testutil.WaitShort)
		defer cancel()
		shot, err := desk.Screenshot(withAgentCredential(ctx, cred), &agentvmv1.ScreenshotRequest{})
		if err != nil {
			last = err.Error()
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("Screenshot: %v", err)
			}
			return false
		}
		if shot.GetScreenWidth() != 1280 || shot.GetScreenHeight() != 800 || shot.GetWidth() != 1280 || shot.GetHeight() != 800 {
			t.Fatalf("screenshot %dx%d of a %dx%d screen, want 1280x800", shot.GetWidth(), shot.GetHeight(), shot.GetScreenWidth(), shot.GetScreenHeight())
		}
		img, err := png.Decode(bytes.NewReader(shot.GetPng()))
		if err != nil {
			t.Fatalf("screenshot is not a PNG: %v", err)
		}
		if img.Bounds() != image.Rect(0, 0, 1280, 800) {
			t.Fatalf("PNG bounds %v", img.Bounds())
		}
		if allBlack(img) {
			last = "an all-black screen"
			return false
		}
		return true
	}, &last)

	ctx, cancel := context.WithTimeout(t.Context(), testutil.WaitShort)
	defer cancel()
	small, err := desk.Screenshot(withAgentCredential(ctx, cred), &agentvmv1.ScreenshotRequest{MaxWidth: 640})
	if err != nil || small.GetWidth() != 640 || small.GetHeight() != 400 || small.GetScreenWidth() != 1280 {
		t.Fatalf("screenshot at max_width 640: %dx%d of %dx%d, %v", small.GetWidth(), small.GetHeight(), small.GetScreenWidth(), small.GetScreenHeight(), err)
	}
}

func allBlack(img image.Image) bool {
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			if r, g, bl, _ := img.At(x, y).RGBA(); r|g|bl != 0 {
				return false
			}
		}
	}
	return true
}

var mouseLocation = regexp.MustCompile(`x:(\d+) y:(\d+)`)

// checkPointer moves the pointer with Desktop.Move and reads it back as the desktop's user sees
// it, presses a key, and checks that a point off the screen is INVALID_ARGUMENT.
func checkPointer(t *testing.T, conn *grpc.ClientConn, cred string) {
	desk := agentvmv1.NewDesktopClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), testutil.WaitShort)
	defer cancel()
	ctx = withAgentCredential(ctx, cred)
	if _, err := desk.Move(ctx, &agentvmv1.MoveRequest{X: 321, Y: 123}); err != nil {
		t.Fatalf("Move: %v", err)
	}
	out := agentExec(t, conn, cred, "runuser -u user -- env DISPLAY=:0 xdotool getmouselocation")
	m := mouseLocation.FindStringSubmatch(out)
	if m == nil || m[1] != "321" || m[2] != "123" {
		t.Fatalf("pointer after Move to 321,123: %q", out)
	}
	if _, err := desk.Key(ctx, &agentvmv1.KeyRequest{Keys: "Escape"}); err != nil {
		t.Fatalf("Key Escape: %v", err)
	}
	_, err := desk.Move(ctx, &agentvmv1.MoveRequest{X: 1280, Y: 0})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Move off the screen: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := desk.Click(ctx, &agentvmv1.ClickRequest{X: 1, Y: 1, Button: "back"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Click with an unknown button: %v, want INVALID_ARGUMENT", err)
	}
}

// checkHomeState measures /home/user with State.Stat and exports it as a tar.
func checkHomeState(t *testing.T, conn *grpc.ClientConn, cred string) {
	state := agentvmv1.NewStateClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), testutil.WaitLong)
	defer cancel()
	ctx = withAgentCredential(ctx, cred)
	st, err := state.Stat(ctx, &agentvmv1.StatRequest{Path: "/home/user"})
	if err != nil {
		t.Fatalf("Stat /home/user: %v", err)
	}
	t.Logf("/home/user: %d files, %d bytes", st.GetFiles(), st.GetBytes())
	if st.GetFiles() == 0 {
		t.Fatal("Stat /home/user: no files")
	}
	if _, err := state.Stat(ctx, &agentvmv1.StatRequest{Path: "home/user"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Stat of a relative path: %v, want INVALID_ARGUMENT", err)
	}
	stream, err := state.Export(ctx, &agentvmv1.ExportRequest{Path: "/home/user"})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() {
		for {
			c, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				_ = pw.Close()
				return
			}
			if err != nil {
				_ = pw.CloseWithError(err)
				return
			}
			_, _ = pw.Write(c.GetData())
		}
	}()
	tr := tar.NewReader(pr)
	var entries int
	var owner string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("export of /home/user: %v", err)
		}
		if hdr.Name == "./" {
			owner = hdr.Uname
		}
		entries++
	}
	if entries < 2 || owner != "user" {
		t.Fatalf("export of /home/user: %d entries, root owned by %q", entries, owner)
	}
}

// checkInBoxMCP lists the agent's tools over the in-box MCP endpoint, reached through the ports
// relay as plain HTTP; the Host header is the box's loopback, as a client in the box sends.
func checkInBoxMCP(t *testing.T, e *testEnv, id string) {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return e.rt.Dial(ctx, id, wire.MCPPort)
		},
		DisableKeepAlives: true,
	}, Timeout: testutil.WaitShort}
	ctx, cancel := context.WithTimeout(t.Context(), testutil.WaitLong)
	defer cancel()
	c, err := client.NewStreamableHttpClient("http://127.0.0.1:"+strconv.Itoa(wire.MCPPort)+wire.MCPPath,
		transport.WithHTTPBasicClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "runtime-test", Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("MCP initialize: %v", err)
	}
	list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("MCP tools/list: %v", err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	for _, want := range []string{"shell", "read_file", "browser_open", "desktop_screenshot", "desktop_click"} {
		if !slices.Contains(names, want) {
			t.Errorf("MCP tools %v lack %s", names, want)
		}
	}
}
