package agentvm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/loomhand/cocoonbox/agentvm/tools"
	"github.com/loomhand/cocoonbox/agentvm/wire"
)

// mcpMaxBody bounds one request: write_file carries up to tools.WriteFileMax of text, which JSON
// escaping can grow several times over.
const mcpMaxBody = 4*tools.WriteFileMax + 1<<20

const mcpInstructions = `The tools of the cocoonbox box you run in: a shell, its files, its Chromium browser and ` +
	`its desktop (display :0), the same tools the box's own agent uses.`

// MCPHandler serves the agent's tools over MCP (Streamable HTTP, stateless) at wire.MCPPath, for
// anything running in the box: a coding agent the box's user starts there gets the shell, files,
// browser and desktop tools by name, with the same schemas and limits the model's loop has.
//
// It takes no credential, by design: it is served on the box's loopback only, and a program in
// the box runs as its user or root and could do what these tools do directly. From outside the
// box its loopback is reachable only through the engine's ports relay, which takes the sandbox
// token that only the control plane holds; a relay of box ports to users (none exists yet) must
// refuse the agent's ports 7070-7072. The DNS-rebinding guard stays on, so a web page in the
// box's browser cannot reach it through a name that resolves to 127.0.0.1.
func MCPHandler(toolset []tools.Tool, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	m := server.NewMCPServer("cocoonbox-agent", Version,
		server.WithToolCapabilities(false),
		server.WithInstructions(mcpInstructions),
	)
	for _, t := range toolset {
		m.AddTool(mcp.NewToolWithRawSchema(t.Name(), t.Description(), t.Schema()), mcpCall(t))
	}
	h := server.NewStreamableHTTPServer(m,
		server.WithEndpointPath(wire.MCPPath),
		server.WithStateLess(true),
		// Stateless: no session exists for a GET stream to deliver anything to.
		server.WithDisableStreaming(true),
		server.WithStreamableHTTPLogger(log),
	)
	mux := http.NewServeMux()
	mux.Handle(wire.MCPPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, mcpMaxBody)
		h.ServeHTTP(w, r)
	}))
	return mux
}

// mcpCall adapts a tool to MCP: its text and images (PNG, base64) become the result's content;
// invalid arguments and failures the tool reports become isError results, as the model's loop
// shows them. Only the caller's own cancellation is a protocol error.
func mcpCall(t tools.Tool) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args, ok := req.GetRawArguments().(json.RawMessage)
		if !ok {
			raw, err := json.Marshal(req.GetRawArguments())
			if err != nil {
				return mcp.NewToolResultError(fmt.Sprintf("%s: arguments: %v", t.Name(), err)), nil
			}
			args = raw
		}
		res, err := runTool(ctx, t, args)
		if err != nil {
			return nil, err
		}
		out := &mcp.CallToolResult{IsError: res.IsError}
		if res.Text != "" || len(res.Images) == 0 {
			out.Content = append(out.Content, mcp.NewTextContent(res.Text))
		}
		for _, img := range res.Images {
			out.Content = append(out.Content, mcp.NewImageContent(base64.StdEncoding.EncodeToString(img), "image/png"))
		}
		return out, nil
	}
}
