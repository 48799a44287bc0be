package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/config"
)

// TestMCPTools is what a local coding agent does over MCP at /mcp on the API port: it connects
// with the CLI's bearer token, lists the tools, creates a box, runs a command in it, writes a
// file and reads it back, hibernates, wakes and snapshots it, and gets tool errors naming a box
// that does not exist, a missing file and a missing argument; without a token it gets 401.
func TestMCPTools(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	d, ctx, owner, _ := newBoxEnv(t, boxConfig(t), 4*time.Minute)
	cli, err := config.LoadCLI(d.Bootstrap().CLIConfig, config.MapEnv(nil))
	if err != nil || cli.Token == "" {
		t.Fatalf("cli config: %+v, %v", cli, err)
	}
	endpoint := d.URLs().API + "/mcp"

	if _, err := mcpConnect(ctx, t, endpoint, ""); !isAuthRequired(err) {
		t.Fatalf("connect without a token: %v, want 401", err)
	}
	if _, err := mcpConnect(ctx, t, endpoint, "cbx_not_a_token"); !isAuthRequired(err) {
		t.Fatalf("connect with an unknown token: %v, want 401", err)
	}

	c, err := mcpConnect(ctx, t, endpoint, cli.Token)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	want := []string{"agent_message", "agent_run", "agent_status", "box_click", "box_create", "box_events", "box_exec", "box_fork", "box_hibernate",
		"box_key", "box_list", "box_policy", "box_port_url", "box_read_file", "box_screenshot", "box_snapshot", "box_type", "box_wake", "box_write_file"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools = %v, want %v", names, want)
	}

	var box struct {
		ID    cocoonbox.BoxID
		Name  string
		State cocoonbox.BoxState
		Role  cocoonbox.Role
	}
	mcpCall(ctx, t, c, "box_create", map[string]any{"name": "agent", "size": "small"}, &box)
	if box.ID.Validate() != nil || box.Name != "agent" || box.State != cocoonbox.BoxStateRunning || box.Role != cocoonbox.RoleOwner {
		t.Fatalf("box_create = %+v", box)
	}

	var run struct {
		ExitCode int `json:"exit_code"`
		Stdout   string
		Stderr   string
	}
	mcpCall(ctx, t, c, "box_exec", map[string]any{"box": "agent", "argv": []string{"uname", "-a"}}, &run)
	if run.ExitCode != 0 || !strings.HasPrefix(run.Stdout, "Linux") {
		t.Fatalf("box_exec uname -a = %+v", run)
	}
	mcpCall(ctx, t, c, "box_exec", map[string]any{"box": string(box.ID), "argv": []string{"sh", "-c", "pwd; exit 3"}, "cwd": "/tmp", "timeout_seconds": 30}, &run)
	if run.ExitCode != 3 || strings.TrimSpace(run.Stdout) != "/tmp" {
		t.Fatalf("box_exec with cwd and an exit code = %+v", run)
	}

	const content = "héllo from an agent\n\tindented \"quoted\" line\n"
	var wrote struct {
		BytesWritten int `json:"bytes_written"`
	}
	mcpCall(ctx, t, c, "box_write_file", map[string]any{"box": "agent", "path": "/root/notes/hello.txt", "content": content, "mode": "0600"}, &wrote)
	if wrote.BytesWritten != len(content) {
		t.Fatalf("box_write_file = %+v, want %d bytes", wrote, len(content))
	}
	var file struct {
		Content *string
		Mode    string
		Size    int
	}
	mcpCall(ctx, t, c, "box_read_file", map[string]any{"box": "agent", "path": "/root/notes/hello.txt"}, &file)
	if file.Content == nil || *file.Content != content || file.Mode != "0600" || file.Size != len(content) {
		t.Fatalf("box_read_file = %+v, want %q mode 0600", file, content)
	}

	// A fork goes on from the box: the file just written is in it.
	var forked struct {
		Forks []struct {
			ID     cocoonbox.BoxID
			State  cocoonbox.BoxState
			Parent cocoonbox.BoxID
		}
	}
	mcpCall(ctx, t, c, "box_fork", map[string]any{"box": "agent"}, &forked)
	if len(forked.Forks) != 1 || forked.Forks[0].State != cocoonbox.BoxStateRunning || forked.Forks[0].Parent != box.ID {
		t.Fatalf("box_fork = %+v, want one running fork of %s", forked, box.ID)
	}
	mcpCall(ctx, t, c, "box_read_file", map[string]any{"box": string(forked.Forks[0].ID), "path": "/root/notes/hello.txt"}, &file)
	if file.Content == nil || *file.Content != content {
		t.Fatalf("box_read_file in the fork = %+v, want %q", file, content)
	}
	if _, err := d.Boxes.Delete(ctx, owner.ID, forked.Forks[0].ID); err != nil {
		t.Fatal(err)
	}

	mcpCall(ctx, t, c, "box_hibernate", map[string]any{"box": "agent"}, &box)
	if box.State != cocoonbox.BoxStateHibernated {
		t.Fatalf("box_hibernate = %+v", box)
	}
	mcpCall(ctx, t, c, "box_wake", map[string]any{"box": "agent"}, &box)
	if box.State != cocoonbox.BoxStateRunning {
		t.Fatalf("box_wake = %+v", box)
	}
	var events struct {
		Events []struct {
			ID     int64
			Action string
			Detail map[string]any
		}
	}
	mcpCall(ctx, t, c, "box_events", map[string]any{"box": "agent", "limit": 50}, &events)
	var woke bool
	for _, e := range events.Events {
		woke = woke || (e.Action == "box.woke" && e.Detail["detail"] != "")
	}
	if !woke {
		t.Fatalf("box_events after a wake: %+v; want the woke event with its reason", events.Events)
	}
	var snap struct {
		ID       string
		BoxID    cocoonbox.BoxID `json:"box_id"`
		Bytes    int64
		BoxState cocoonbox.BoxState `json:"box_state"`
	}
	mcpCall(ctx, t, c, "box_snapshot", map[string]any{"box": "agent"}, &snap)
	if !strings.HasPrefix(snap.ID, "sn_") || snap.BoxID != box.ID || snap.Bytes == 0 || snap.BoxState != cocoonbox.BoxStateRunning {
		t.Fatalf("box_snapshot = %+v", snap)
	}
	var list struct {
		Boxes []struct {
			ID    cocoonbox.BoxID
			State cocoonbox.BoxState
		}
	}
	mcpCall(ctx, t, c, "box_list", nil, &list)
	if len(list.Boxes) != 1 || list.Boxes[0].ID != box.ID {
		t.Fatalf("box_list = %+v, want just %s", list, box.ID)
	}

	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"box_exec", map[string]any{"box": "nosuchbox", "argv": []string{"true"}}, `box "nosuchbox" not found`},
		{"box_read_file", map[string]any{"box": "agent", "path": "/root/missing.txt"}, "/root/missing.txt"},
		{"box_exec", map[string]any{"box": "agent"}, "argv"}, // rejected by the input schema
	} {
		res := mcpCallRaw(ctx, t, c, tc.tool, tc.args)
		if !res.IsError || !strings.Contains(mcpText(res), tc.want) {
			t.Errorf("%s %v = %+v, want an isError result naming %q", tc.tool, tc.args, res, tc.want)
		}
	}
}

// mcpConnect opens and initializes an MCP client session with token ("" for none).
func mcpConnect(ctx context.Context, t testing.TB, endpoint, token string) (*client.Client, error) {
	t.Helper()
	var opts []transport.StreamableHTTPCOption
	if token != "" {
		opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	}
	c, err := client.NewStreamableHttpClient(endpoint, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "devstack-test", Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		return nil, err
	}
	return c, nil
}

func isAuthRequired(err error) bool {
	var ae *transport.AuthorizationRequiredError
	return errors.As(err, &ae)
}

// mcpCall calls a tool that must succeed and decodes its JSON text result into out.
func mcpCall(ctx context.Context, t *testing.T, c *client.Client, tool string, args map[string]any, out any) {
	t.Helper()
	res := mcpCallRaw(ctx, t, c, tool, args)
	if res.IsError {
		t.Fatalf("%s %v: tool error %q", tool, args, mcpText(res))
	}
	if err := json.Unmarshal([]byte(mcpText(res)), out); err != nil {
		t.Fatalf("%s: result %q: %v", tool, mcpText(res), err)
	}
}

func mcpCallRaw(ctx context.Context, t *testing.T, c *client.Client, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	var req mcp.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

func mcpText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := mcp.AsTextContent(c); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
