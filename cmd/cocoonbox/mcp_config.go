package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// mcpCommand helps local coding agents (Claude Code, Cursor, …) use cocoonbox through MCP.
func mcpCommand() *cli.Command {
	return &cli.Command{
		Name:   "mcp",
		Usage:  "connect local coding agents to cocoonbox over MCP",
		Action: groupAction,
		Subcommands: []*cli.Command{{
			Name:  "config",
			Usage: "print the mcpServers entry for Claude Code, Cursor and other MCP clients",
			Description: "Prints JSON to merge into .mcp.json (Claude Code) or ~/.cursor/mcp.json (Cursor), or to pass\n" +
				"to `claude mcp add-json cocoonbox`. It holds your API token: keep it out of shared files.",
			Flags:  apiFlags(&cli.StringFlag{Name: "name", Value: "cocoonbox", Usage: "server name in mcpServers"}),
			Action: mcpConfig,
		}},
	}
}

// mcpServer is one entry of an MCP client's mcpServers map (Streamable HTTP transport).
type mcpServer struct {
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

func mcpConfig(c *cli.Context) error {
	if _, err := positional(c, "[--name NAME]", 0, 0); err != nil {
		return err
	}
	if _, err := outputJSON(c); err != nil {
		return err
	}
	cfg, _, err := resolveCLI(c)
	if err != nil {
		return err
	}
	if cfg.Endpoint == "" || cfg.Token == "" {
		return usageError("mcp config: no endpoint or token: run `cocoonbox login` or `cocoonbox dev`, or pass --endpoint and --token")
	}
	if c.String("name") == "" {
		return usageError("mcp config: --name must not be empty")
	}
	entry := map[string]map[string]mcpServer{"mcpServers": {c.String("name"): {
		Type:    "http",
		URL:     strings.TrimRight(cfg.Endpoint, "/") + "/mcp",
		Headers: map[string]string{"Authorization": "Bearer " + cfg.Token},
	}}}
	if err := writeJSONValue(c.App.Writer, entry); err != nil {
		return err
	}
	_, err = c.App.ErrWriter.Write([]byte("cocoonbox: note: this snippet contains your API token; keep it private (a separate token: cocoonbox token create --name mcp)\n"))
	return err
}
