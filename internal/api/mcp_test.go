package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/loomhand/cocoonbox/internal/store"
	"github.com/loomhand/cocoonbox/internal/store/storetest"
)

// TestMCPToolSchemas lists the tools as an agent sees them and checks that every input schema
// came out with the properties and required fields the handlers read: a mistake in a schema
// option yields an empty or loose schema without any error.
func TestMCPToolSchemas(t *testing.T) {
	s := New(Options{Store: storetest.New(t), Version: "test"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.NewInProcessClient(s.mcpServer())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}

	type schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	want := map[string]struct{ props, required []string }{
		"box_list":       {},
		"box_create":     {[]string{"name", "network", "network_allow", "size"}, []string{"name"}},
		"box_wake":       {[]string{"box"}, []string{"box"}},
		"box_port_url":   {[]string{"box", "port"}, []string{"box", "port"}},
		"box_hibernate":  {[]string{"box"}, []string{"box"}},
		"box_fork":       {[]string{"box", "count", "name"}, []string{"box"}},
		"box_events":     {[]string{"box", "after_id", "limit"}, []string{"box"}},
		"box_policy":     {[]string{"box", "idle", "durable", "snapshot_every", "keep_snapshots", "lease_idle", "record_runs"}, []string{"box"}},
		"box_exec":       {[]string{"box", "argv", "cwd", "timeout_seconds"}, []string{"box", "argv"}},
		"box_read_file":  {[]string{"box", "path"}, []string{"box", "path"}},
		"box_write_file": {[]string{"box", "path", "content", "mode"}, []string{"box", "path", "content"}},
		"box_snapshot":   {[]string{"box"}, []string{"box"}},
		"box_screenshot": {[]string{"box", "max_width"}, []string{"box"}},
		"box_click":      {[]string{"box", "x", "y", "button", "double"}, []string{"box", "x", "y"}},
		"box_type":       {[]string{"box", "text"}, []string{"box", "text"}},
		"box_key":        {[]string{"box", "keys"}, []string{"box", "keys"}},
		"agent_run":      {[]string{"box", "task", "model", "max_steps", "max_tokens", "wait"}, []string{"box", "task"}},
		"agent_status":   {[]string{"run"}, []string{"run"}},
		"agent_message":  {[]string{"run", "text"}, []string{"run", "text"}},
	}
	got := map[string]bool{}
	for _, tool := range res.Tools {
		got[tool.Name] = true
		w, ok := want[tool.Name]
		if !ok {
			t.Errorf("unexpected tool %s", tool.Name)
			continue
		}
		if len(tool.Description) < 20 {
			t.Errorf("%s: description %q is too thin for an agent to choose by", tool.Name, tool.Description)
		}
		raw, err := json.Marshal(tool.InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		var sc schema
		if err := json.Unmarshal(raw, &sc); err != nil {
			t.Fatalf("%s: schema %s: %v", tool.Name, raw, err)
		}
		if sc.Type != "object" {
			t.Errorf("%s: schema type %q, want object: %s", tool.Name, sc.Type, raw)
		}
		var props []string
		for name, p := range sc.Properties {
			props = append(props, name)
			var prop struct {
				Type        string `json:"type"`
				Description string `json:"description"`
				Items       *struct {
					Type string `json:"type"`
				} `json:"items"`
			}
			if err := json.Unmarshal(p, &prop); err != nil || prop.Type == "" || prop.Description == "" {
				t.Errorf("%s.%s: property schema %s lacks a type or description (%v)", tool.Name, name, p, err)
			}
			if prop.Type == "array" && (prop.Items == nil || prop.Items.Type != "string") {
				t.Errorf("%s.%s: array schema %s lacks string items", tool.Name, name, p)
			}
		}
		slices.Sort(props)
		wantProps := slices.Sorted(slices.Values(w.props))
		if !slices.Equal(props, wantProps) {
			t.Errorf("%s: properties %v, want %v (schema %s)", tool.Name, props, wantProps, raw)
		}
		req := slices.Sorted(slices.Values(sc.Required))
		wantReq := slices.Sorted(slices.Values(w.required))
		if !slices.Equal(req, wantReq) {
			t.Errorf("%s: required %v, want %v (schema %s)", tool.Name, req, wantReq, raw)
		}
	}
	for name := range want {
		if !got[name] {
			t.Errorf("tool %s is missing", name)
		}
	}

	// A call without a caller never reaches the service (only the HTTP handler attaches one).
	var call mcp.CallToolRequest
	call.Params.Name = "box_list"
	out, err := c.CallTool(ctx, call)
	if err != nil || !out.IsError || !strings.Contains(toolText(out), "not authenticated") {
		t.Fatalf("call without a principal: %+v, %v; want an isError result", out, err)
	}
}

// TestMCPAuth checks that /mcp answers 401 with a bearer challenge before any MCP processing
// when the token is missing, unknown or revoked, and lets a live token through.
func TestMCPAuth(t *testing.T) {
	st := storetest.New(t)
	s := New(Options{Store: st, Version: "test"})
	srv := httptest.NewServer(s.mcpHandler())
	defer srv.Close()
	ctx := context.Background()

	u, err := st.CreateUser(ctx, store.NewUser{Name: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := store.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := st.CreateToken(ctx, u.ID, "agent", store.HashToken(raw))
	if err != nil {
		t.Fatal(err)
	}

	post := func(auth string) *http.Response {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	check401 := func(name, auth, wantMsg, wantChallenge string) {
		t.Helper()
		resp := post(auth)
		var body struct {
			Error struct{ Code, Message string }
		}
		err := json.NewDecoder(resp.Body).Decode(&body)
		if resp.StatusCode != http.StatusUnauthorized || err != nil || body.Error.Code != "unauthorized" ||
			!strings.Contains(body.Error.Message, wantMsg) {
			t.Errorf("%s: %d %+v (%v), want 401 unauthorized %q", name, resp.StatusCode, body, err, wantMsg)
		}
		if ch := resp.Header.Get("WWW-Authenticate"); ch != wantChallenge {
			t.Errorf("%s: WWW-Authenticate %q, want %q", name, ch, wantChallenge)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", name, ct)
		}
	}
	const challenge = `Bearer realm="cocoonbox"`
	check401("no token", "", "missing bearer token", challenge)
	check401("not bearer", "Basic "+raw, "missing bearer token", challenge)
	check401("unknown token", "Bearer cbx_"+strings.Repeat("a", 52), "unknown, expired or revoked token", challenge+`, error="invalid_token"`)

	if resp := post("bearer " + raw); resp.StatusCode != http.StatusOK {
		t.Fatalf("live token: %d, want 200", resp.StatusCode)
	}
	if err := st.RevokeToken(ctx, u.ID, tok.ID); err != nil {
		t.Fatal(err)
	}
	check401("revoked token", "Bearer "+raw, "unknown, expired or revoked token", challenge+`, error="invalid_token"`)
}

func toolText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := mcp.AsTextContent(c); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
