package agentvm_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"

	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/tools"
	"github.com/loomhand/cocoonbox/agentvm/tools/desktop"
	"github.com/loomhand/cocoonbox/agentvm/wire"
)

func TestMCPServesTheTools(t *testing.T) {
	dir := t.TempDir()
	toolset := append([]tools.Tool{tools.Shell{Dir: dir}}, tools.Files(dir)...)
	x := &xdotool{}
	toolset = append(toolset, desktop.New(desktop.Config{Run: x.run, Screen: fakeScreen{}}).Tools()...)
	loop := &agentvm.Loop{Tools: toolset}
	srv := httptest.NewServer(agentvm.MCPHandler(loop.GateDesktop(toolset), nil))
	t.Cleanup(srv.Close)

	ctx := t.Context()
	c, err := client.NewStreamableHttpClient(srv.URL + wire.MCPPath)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Start(ctx))
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
	ir, err := c.Initialize(ctx, init)
	require.NoError(t, err)
	require.Equal(t, agentvm.Version, ir.ServerInfo.Version)

	list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	require.NoError(t, err)
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
		i := slices.IndexFunc(toolset, func(x tools.Tool) bool { return x.Name() == tl.Name })
		require.GreaterOrEqual(t, i, 0, tl.Name)
		// The client reads the schema into its struct, which adds an empty "required".
		raw, err := json.Marshal(tl.InputSchema)
		require.NoError(t, err)
		var got, want map[string]any
		require.NoError(t, json.Unmarshal(raw, &got))
		require.NoError(t, json.Unmarshal(toolset[i].Schema(), &want))
		if r, ok := got["required"].([]any); ok && len(r) == 0 && want["required"] == nil {
			delete(got, "required")
		}
		require.Equal(t, want, got, tl.Name)
		require.Equal(t, toolset[i].Description(), tl.Description)
	}
	require.Len(t, names, len(toolset))
	require.Contains(t, names, "desktop_screenshot")

	call := func(name string, args any) *mcp.CallToolResult {
		t.Helper()
		var req mcp.CallToolRequest
		req.Params.Name, req.Params.Arguments = name, args
		res, err := c.CallTool(ctx, req)
		require.NoError(t, err, name)
		return res
	}
	text := func(res *mcp.CallToolResult) string {
		var b strings.Builder
		for _, ct := range res.Content {
			if tc, ok := mcp.AsTextContent(ct); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}

	res := call("shell", map[string]any{"command": "echo hi >out.txt && cat out.txt"})
	require.False(t, res.IsError, text(res))
	require.Contains(t, text(res), "hi")
	res = call("read_file", map[string]any{"path": "out.txt"})
	require.False(t, res.IsError, text(res))
	require.Contains(t, text(res), "hi")

	res = call("desktop_screenshot", map[string]any{})
	require.False(t, res.IsError, text(res))
	var images int
	for _, ct := range res.Content {
		if ic, ok := mcp.AsImageContent(ct); ok {
			images++
			require.Equal(t, "image/png", ic.MIMEType)
			data, err := base64.StdEncoding.DecodeString(ic.Data)
			require.NoError(t, err)
			img, err := png.Decode(bytes.NewReader(data))
			require.NoError(t, err)
			require.Equal(t, 1280, img.Bounds().Dx())
		}
	}
	require.Equal(t, 1, images)

	// Invalid arguments and failures are isError results naming the problem.
	res = call("desktop_click", map[string]any{"x": -1, "y": 1})
	require.True(t, res.IsError)
	require.Contains(t, text(res), "x: must not be negative")
	res = call("read_file", map[string]any{"path": "missing.txt"})
	require.True(t, res.IsError, text(res))

	// While a person holds the desktop, programs in the box are refused its input as the model
	// is; looking stays allowed.
	loop.SetDesktopHeld(true, 1)
	res = call("desktop_click", map[string]any{"x": 10, "y": 10})
	require.True(t, res.IsError)
	require.Equal(t, agentvm.RefusedWhileControlled, text(res))
	require.Empty(t, x.calls, "a refused click reached xdotool")
	res = call("desktop_screenshot", map[string]any{})
	require.False(t, res.IsError, text(res))
	loop.SetDesktopHeld(false, 2)
	res = call("desktop_click", map[string]any{"x": 10, "y": 10})
	require.False(t, res.IsError, text(res))
	require.NotEmpty(t, x.calls)

	// The DNS-rebinding guard: a loopback request naming a foreign host is refused.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+wire.MCPPath, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	require.NoError(t, err)
	req.Host = "evil.example"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
}
