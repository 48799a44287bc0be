package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
	"github.com/loomhand/cocoonbox/workflows"
)

// mcpMaxBody bounds one request to /mcp: box_write_file carries up to boxsvc.MaxFileBytes of
// text, which JSON escaping can grow several times over.
const mcpMaxBody = 4*boxsvc.MaxFileBytes + 1<<20

const mcpInstructions = `cocoonbox boxes are persistent Linux computers in the cloud. Name a box by its name ` +
	`(one of your boxes) or its ID (bx_…; boxes shared with you are named by ID). A hibernated box is ` +
	`woken by any call that needs it running (box_exec, box_read_file, box_write_file, box_screenshot and ` +
	`the desktop input tools), so there is rarely a need to call box_wake first.`

// mcpHandler serves MCP over Streamable HTTP for local coding agents. It is stateless, so any API
// replica can answer any request, and every request carries its own bearer token.
func (s *Server) mcpHandler() http.Handler {
	h := server.NewStreamableHTTPServer(s.mcpServer(),
		server.WithStateLess(true),
		// Stateless: no session exists for a GET stream to deliver anything to.
		server.WithDisableStreaming(true),
		// The DNS-rebinding guard rejects loopback connections with a foreign Host header, which is
		// what a TLS proxy on the same host sends. It protects unauthenticated local servers; here a
		// rebinding page cannot present a bearer token.
		server.WithDisableLocalhostProtection(true),
		server.WithStreamableHTTPLogger(s.log),
	)
	return s.mcpAuth(h)
}

// mcpAuth answers 401 unless the request carries a live bearer token, and hands the principal
// to the tool handlers through the request's context.
func (s *Server) mcpAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := httpBearer(r)
		p, err := s.authorize(r.Context(), token, routeMCP)
		if err != nil {
			if cocoonbox.ErrorCode(err) == cocoonbox.EUnauthorized {
				challenge := `Bearer realm="cocoonbox"`
				if token != "" {
					challenge += `, error="invalid_token"`
				}
				w.Header().Set("WWW-Authenticate", challenge)
			}
			s.writeHTTPError(w, r, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, mcpMaxBody)
		bodyDeadline(w, r)
		next.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), p)))
	})
}

// httpBearer extracts the token from an "Authorization: Bearer <token>" header; the scheme is
// case-insensitive, as HTTP says.
func httpBearer(r *http.Request) string {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// httpStatus maps domain error codes to HTTP statuses for plain HTTP routes.
var httpStatus = map[string]int{
	cocoonbox.EInvalid:       http.StatusBadRequest,
	cocoonbox.ENotFound:      http.StatusNotFound,
	cocoonbox.EConflict:      http.StatusConflict,
	cocoonbox.EUnauthorized:  http.StatusUnauthorized,
	cocoonbox.EForbidden:     http.StatusForbidden,
	cocoonbox.EUnavailable:   http.StatusServiceUnavailable,
	cocoonbox.ENoCapacity:    http.StatusServiceUnavailable,
	cocoonbox.EUnimplemented: http.StatusNotImplemented,
	cocoonbox.ECorrupt:       http.StatusInternalServerError,
	cocoonbox.EInternal:      http.StatusInternalServerError,

	cocoonbox.EResourceExhausted: http.StatusTooManyRequests,
}

// writeHTTPError answers with {"error":{"code","message"}}; internal errors are logged in full
// and shown as "internal error".
func (s *Server) writeHTTPError(w http.ResponseWriter, r *http.Request, err error) {
	code := cocoonbox.ErrorCode(err)
	if code == cocoonbox.EInternal || code == cocoonbox.EUnavailable {
		s.log.ErrorContext(r.Context(), "http request failed", "path", r.URL.Path, "code", code, "err", err)
	}
	writeError(w, code, cocoonbox.ErrorMessage(err))
}

// writeError writes an error body {"error": {"code", "message"}} with the code's HTTP status.
func writeError(w http.ResponseWriter, code, msg string) {
	st, ok := httpStatus[code]
	if !ok {
		st = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(st)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]string{"code": code, "message": msg},
	})
}

// mcpServer builds the MCP server and its tools, thin adapters over the box service.
func (s *Server) mcpServer() *server.MCPServer {
	m := server.NewMCPServer("cocoonbox", s.version,
		server.WithToolCapabilities(false),
		server.WithInputSchemaValidation(),
		server.WithInstructions(mcpInstructions),
	)
	for _, t := range s.mcpTools() {
		m.AddTool(t.tool, s.mcpCall(t.tool.Name, t.run))
	}
	return m
}

// mcpTool is a tool and what it does for the authenticated caller; run's result is sent back as
// JSON text, unless it is a *mcp.CallToolResult, which is sent as it is.
type mcpTool struct {
	tool mcp.Tool
	run  func(ctx context.Context, caller string, req mcp.CallToolRequest) (any, error)
}

func boxArg() mcp.ToolOption {
	return mcp.WithString("box", mcp.Required(), mcp.MinLength(1),
		mcp.Description("The box: its name (one of your boxes) or its ID (bx_…)."))
}

func pathArg(what string) mcp.ToolOption {
	return mcp.WithString("path", mcp.Required(), mcp.MinLength(1), mcp.Pattern("^/"),
		mcp.Description("Absolute path of the file "+what+" inside the box."))
}

func (s *Server) mcpTools() []mcpTool {
	sizes := make([]string, len(cocoonbox.Sizes))
	for i, z := range cocoonbox.Sizes {
		sizes[i] = string(z)
	}
	tools := []mcpTool{{
		tool: mcp.NewTool("box_list",
			mcp.WithDescription("List your boxes and the boxes shared with you, newest first, with each box's state and your role on it."),
			mcp.WithReadOnlyHintAnnotation(true), mcp.WithDestructiveHintAnnotation(false),
		),
		run: func(ctx context.Context, caller string, _ mcp.CallToolRequest) (any, error) {
			views, err := s.boxes.List(ctx, caller)
			if err != nil {
				return nil, err
			}
			out := make([]boxJSON, len(views))
			for i, v := range views {
				out[i] = toBoxJSON(v)
			}
			return map[string]any{"boxes": out}, nil
		},
	}, {
		tool: mcp.NewTool("box_create",
			mcp.WithDescription("Create a box, a persistent Linux computer, and wait until it runs. Returns the box with its ID."),
			mcp.WithString("name", mcp.Required(), mcp.MinLength(1), mcp.MaxLength(cocoonbox.MaxBoxNameLen),
				mcp.Pattern(`^[A-Za-z0-9][A-Za-z0-9._-]*$`),
				mcp.Description("A name unique among your boxes: letters, digits, '-', '_' and '.', starting with a letter or digit.")),
			mcp.WithString("size", mcp.Enum(sizes...), mcp.DefaultString(string(cocoonbox.DefaultSize)),
				mcp.Description("CPU and memory tier; "+string(cocoonbox.DefaultSize)+" when omitted.")),
			mcp.WithString("network", mcp.Enum(cocoonbox.NetworkPolicies...),
				mcp.Description("The box's egress policy for life: none (no network), internet (all but the host, other boxes and private ranges) or allow (only network_allow); the server's default when omitted.")),
			mcp.WithArray("network_allow", mcp.WithStringItems(), mcp.MaxItems(cocoonbox.MaxNetworkAllow),
				mcp.Description("With network allow: the destinations the box may reach, IPv4 CIDR or CIDR:port.")),
			mcp.WithDestructiveHintAnnotation(false),
		),
		run: func(ctx context.Context, caller string, req mcp.CallToolRequest) (any, error) {
			v, err := s.boxes.Create(ctx, caller, boxsvc.CreateRequest{
				Name: req.GetString("name", ""),
				Size: cocoonbox.Size(req.GetString("size", "")),
				Network: cocoonbox.Network{Policy: req.GetString("network", ""),
					Allow: req.GetStringSlice("network_allow", nil)},
			})
			if err != nil {
				return nil, err
			}
			return toBoxJSON(v), nil
		},
	}, {
		tool: mcp.NewTool("box_wake",
			mcp.WithDescription("Wake a hibernated box and wait until it runs; a running box is returned as it is."),
			boxArg(),
			mcp.WithDestructiveHintAnnotation(false), mcp.WithIdempotentHintAnnotation(true),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, _ mcp.CallToolRequest) (any, error) {
			v, err := s.boxes.Wake(ctx, caller, id)
			return toBoxJSON(v), err
		}),
	}, {
		tool: mcp.NewTool("box_port_url",
			mcp.WithDescription("Where to open a port of a box through this server: preview_path is an HTTP proxy to the web server on the port "+
				"(send the same bearer token), tunnel_path a WebSocket carrying one TCP connection to it. listening says whether "+
				"anything in the box listens there now (the box is woken for a driver), public whether it answers anyone without a token, and "+
				"preview_host, when this server has a preview domain, is the port's own origin for a browser."),
			boxArg(),
			mcp.WithNumber("port", mcp.Required(), mcp.Min(1), mcp.Max(65535), mcp.Description("The TCP port on the box's loopback.")),
			mcp.WithReadOnlyHintAnnotation(true),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, req mcp.CallToolRequest) (any, error) {
			port := req.GetInt("port", 0)
			if err := boxsvc.CheckPort(port); err != nil {
				return nil, err
			}
			ports, err := s.boxes.ListPorts(ctx, caller, id)
			if err != nil {
				return nil, err
			}
			public, err := s.boxes.PublicPorts(ctx, caller, id)
			if err != nil {
				return nil, err
			}
			p := s.portProto(id, port, slices.Contains(public, port))
			out := map[string]any{"port": port, "preview_path": p.GetPreviewPath(), "tunnel_path": p.GetTunnelPath(),
				"listening": slices.Contains(ports, port), "public": p.GetPublic()}
			if p.GetPreviewHost() != "" {
				out["preview_host"] = p.GetPreviewHost()
			}
			return out, nil
		}),
	}, {
		tool: mcp.NewTool("box_hibernate",
			mcp.WithDescription("Hibernate a box: its disk and memory are kept and it stops using compute until woken."),
			boxArg(),
			mcp.WithDestructiveHintAnnotation(false), mcp.WithIdempotentHintAnnotation(true),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, _ mcp.CallToolRequest) (any, error) {
			v, err := s.boxes.Hibernate(ctx, caller, id)
			return toBoxJSON(v), err
		}),
	}, {
		tool: mcp.NewTool("box_fork",
			mcp.WithDescription("Copy a running or hibernated box with its disk and memory into new boxes that go on "+
				"from this moment: the same open windows and running processes, each fork with a machine ID of its own. "+
				"The box is paused only for the copy. Use forks to try several approaches from one state. Returns the forks."),
			boxArg(),
			mcp.WithInteger("count", mcp.Min(1), mcp.Max(workflows.MaxForks), mcp.DefaultNumber(1), mcp.Description("How many forks (default 1).")),
			mcp.WithString("name", mcp.Description("The forks' name prefix: they are called NAME-1, NAME-2, …; default the box's name followed by -fork.")),
			mcp.WithDestructiveHintAnnotation(false),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, req mcp.CallToolRequest) (any, error) {
			forked, err := s.boxes.Fork(ctx, caller, id, boxsvc.ForkRequest{Count: req.GetInt("count", 1), Name: req.GetString("name", "")})
			if err != nil {
				return nil, err
			}
			out := make([]boxJSON, 0, len(forked.Boxes))
			for _, v := range forked.Boxes {
				out = append(out, toBoxJSON(v))
			}
			return map[string]any{"forks": out, "paused_ms": forked.Paused.Milliseconds()}, nil
		}),
	}, {
		tool: mcp.NewTool("box_events",
			mcp.WithDescription("What happened to a box, oldest first: who did what, why it slept or woke (idle, "+
				"requested by a user), its seals and restores, a warning before an idle hibernate, agent runs ending. "+
				"Without after_id, the newest; with it, those after that event's id (to follow)."),
			boxArg(),
			mcp.WithInteger("after_id", mcp.Min(0), mcp.Description("Only the events after this event id.")),
			mcp.WithInteger("limit", mcp.Min(1), mcp.Max(boxsvc.MaxEvents), mcp.DefaultNumber(boxsvc.DefaultEvents),
				mcp.Description(fmt.Sprintf("At most this many events (default %d).", boxsvc.DefaultEvents))),
			mcp.WithReadOnlyHintAnnotation(true),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, req mcp.CallToolRequest) (any, error) {
			events, err := s.boxes.ListEvents(ctx, caller, id, int64(req.GetInt("after_id", 0)), req.GetInt("limit", 0))
			if err != nil {
				return nil, err
			}
			out := make([]map[string]any, 0, len(events))
			for _, e := range events {
				out = append(out, map[string]any{"id": e.ID, "actor": e.Actor, "action": e.Action, "detail": json.RawMessage(e.Detail), "at": e.At})
			}
			return map[string]any{"events": out}, nil
		}),
	}, {
		tool: mcp.NewTool("box_policy",
			mcp.WithDescription("Change how a box behaves on its own (admin): how long it runs idle before it hibernates, "+
				"whether every hibernate seals it into a verified snapshot, how often a running box is sealed, how many snapshots it keeps. "+
				"What is not given stays as it is; the answer is the box with its policy."),
			boxArg(),
			mcp.WithString("idle", mcp.Description(`How long the box runs with nothing happening before it hibernates, e.g. "30m" or "2h" (1m to 720h); "0" never by itself.`)),
			mcp.WithBoolean("durable", mcp.Description("Seal the box into a verified snapshot at every hibernate (uploaded while it sleeps).")),
			mcp.WithString("snapshot_every", mcp.Description(`Seal a running box this long after its last snapshot when it was active, e.g. "1h" (5m to 720h); "0" never by itself.`)),
			mcp.WithString("lease_idle", mcp.Description(`How long the desktop's control lease outlives its holder's last control connection, e.g. "5m" (30s to 24h).`)),
			mcp.WithInteger("keep_snapshots", mcp.Min(1), mcp.Max(boxsvc.MaxKeepSnapshots), mcp.Description("How many complete snapshots to keep (pinned ones besides).")),
			mcp.WithBoolean("record_runs", mcp.Description("Record the desktop of every agent run on the box, for replay beside its steps.")),
			mcp.WithDestructiveHintAnnotation(false), mcp.WithIdempotentHintAnnotation(true),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, req mcp.CallToolRequest) (any, error) {
			c, err := mcpPolicyChange(req.GetArguments())
			if err != nil {
				return nil, err
			}
			v, err := s.boxes.ChangePolicy(ctx, caller, id, c)
			return toBoxJSON(v), err
		}),
	}, {
		tool: mcp.NewTool("box_exec",
			mcp.WithDescription("Run a command in a box to completion and return its exit code, stdout and stderr. "+
				"argv is not run through a shell; use [\"sh\", \"-c\", \"…\"] for pipes and redirection. "+
				"A non-zero exit code is a result, not an error. Output over 8 MiB is refused."),
			boxArg(),
			mcp.WithArray("argv", mcp.Required(), mcp.MinItems(1), mcp.WithStringItems(),
				mcp.Description(`The program and its arguments, e.g. ["uname", "-a"].`)),
			mcp.WithString("cwd", mcp.Pattern("^/"),
				mcp.Description("Absolute working directory; the user's home when omitted.")),
			mcp.WithInteger("timeout_seconds", mcp.Min(1), mcp.Max(boxsvc.MaxExecTimeout),
				mcp.DefaultNumber(boxsvc.DefaultExecTimeout),
				mcp.Description(fmt.Sprintf("Kill the command after this many seconds (default %d).", boxsvc.DefaultExecTimeout))),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, req mcp.CallToolRequest) (any, error) {
			argv, err := req.RequireStringSlice("argv")
			if err != nil {
				return nil, cocoonbox.Invalid("argv", "must be an array of strings")
			}
			return s.boxes.Exec(ctx, caller, id, boxsvc.ExecRequest{
				Argv:           argv,
				Cwd:            req.GetString("cwd", ""),
				TimeoutSeconds: req.GetInt("timeout_seconds", 0),
			})
		}),
	}, {
		tool: mcp.NewTool("box_read_file",
			mcp.WithDescription("Read a file from a box (at most 8 MiB). Text comes back in content; "+
				"a file that is not UTF-8 comes back base64-encoded in content_base64."),
			boxArg(), pathArg("to read"),
			mcp.WithReadOnlyHintAnnotation(true), mcp.WithDestructiveHintAnnotation(false),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, req mcp.CallToolRequest) (any, error) {
			p := req.GetString("path", "")
			b, mode, err := s.boxes.ReadFile(ctx, caller, id, p)
			if err != nil {
				return nil, err
			}
			out := fileJSON{Path: p, Size: len(b), Mode: fmt.Sprintf("%04o", mode)}
			if utf8.Valid(b) {
				text := string(b)
				out.Content = &text
			} else {
				out.ContentBase64 = base64.StdEncoding.EncodeToString(b)
			}
			return out, nil
		}),
	}, {
		tool: mcp.NewTool("box_write_file",
			mcp.WithDescription("Write a text file in a box (at most 8 MiB), creating parent directories and replacing "+
				"any file there in one step: a failed write leaves the old file intact."),
			boxArg(), pathArg("to write"),
			mcp.WithString("content", mcp.Required(), mcp.Description("The file's full new content.")),
			mcp.WithString("mode", mcp.Pattern("^0?[0-7]{3,4}$"), mcp.DefaultString("0644"),
				mcp.Description(`Permission bits in octal, e.g. "0755" for a script; "0644" when omitted.`)),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, req mcp.CallToolRequest) (any, error) {
			content, err := req.RequireString("content")
			if err != nil {
				return nil, cocoonbox.Invalid("content", "is required: the file's text")
			}
			var mode uint64
			if m := req.GetString("mode", ""); m != "" {
				if mode, err = strconv.ParseUint(m, 8, 32); err != nil {
					return nil, cocoonbox.Invalid("mode", fmt.Sprintf("must be octal permission bits such as \"0644\", got %q", m))
				}
			}
			p := req.GetString("path", "")
			n, err := s.boxes.WriteFile(ctx, caller, id, p, []byte(content), uint32(mode))
			if err != nil {
				return nil, err
			}
			return map[string]any{"path": p, "bytes_written": n}, nil
		}),
	}, {
		tool: mcp.NewTool("box_snapshot",
			mcp.WithDescription("Snapshot a box's disk to object storage and wait until the snapshot is verified; "+
				"it can later be restored. Returns the snapshot's ID and size."),
			boxArg(),
			mcp.WithDestructiveHintAnnotation(false),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, _ mcp.CallToolRequest) (any, error) {
			res, err := s.boxes.Snapshot(ctx, caller, id)
			if err != nil {
				return nil, err
			}
			return toSnapshotJSON(res), nil
		}),
	}}
	tools = append(tools, s.mcpDesktopTools()...)
	return append(tools, s.mcpAgentTools()...)
}

// onBox resolves the "box" argument to the box's ID before calling run.
func (s *Server) onBox(run func(ctx context.Context, caller string, id cocoonbox.BoxID, req mcp.CallToolRequest) (any, error)) func(context.Context, string, mcp.CallToolRequest) (any, error) {
	return func(ctx context.Context, caller string, req mcp.CallToolRequest) (any, error) {
		id, err := s.boxes.Resolve(ctx, caller, req.GetString("box", ""))
		if err != nil {
			return nil, err
		}
		return run(ctx, caller, id, req)
	}
}

// mcpCall adapts run to mcp-go: it finds the caller, runs the tool, and turns the outcome into a
// JSON text result or an isError result, the MCP end of the domain error table. Internal errors
// and panics are logged in full and reach the agent as "internal error".
func (s *Server) mcpCall(name string, run func(context.Context, string, mcp.CallToolRequest) (any, error)) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (res *mcp.CallToolResult, _ error) {
		defer func() {
			if r := recover(); r != nil {
				res = s.mcpError(ctx, name, s.panicError(ctx, "tool "+name, r))
			}
		}()
		p, ok := PrincipalFrom(ctx)
		if !ok {
			return s.mcpError(ctx, name, cocoonbox.Errorf(cocoonbox.EUnauthorized, "not authenticated")), nil
		}
		if s.boxes == nil {
			return s.mcpError(ctx, name, cocoonbox.Errorf(cocoonbox.EUnavailable, "this server does not serve boxes")), nil
		}
		out, err := run(ctx, p.User.ID, req)
		if err != nil {
			return s.mcpError(ctx, name, err), nil
		}
		if r, ok := out.(*mcp.CallToolResult); ok {
			return r, nil // a result of its own content, such as an image
		}
		b, err := json.Marshal(out)
		if err != nil {
			return s.mcpError(ctx, name, fmt.Errorf("encode %s result: %w", name, err)), nil
		}
		return mcp.NewToolResultText(string(b)), nil
	}
}

func (s *Server) mcpError(ctx context.Context, tool string, err error) *mcp.CallToolResult {
	code := cocoonbox.ErrorCode(err)
	if code == cocoonbox.EInternal {
		s.log.ErrorContext(ctx, "internal error", "tool", tool, "err", err)
		return mcp.NewToolResultError("internal error")
	}
	return mcp.NewToolResultError(code + ": " + cocoonbox.ErrorMessage(err))
}

// boxJSON is a box as MCP tools show it.
type boxJSON struct {
	ID           cocoonbox.BoxID    `json:"id"`
	Name         string             `json:"name"`
	State        cocoonbox.BoxState `json:"state"`
	Size         cocoonbox.Size     `json:"size"`
	Owner        string             `json:"owner"`
	Role         cocoonbox.Role     `json:"role"`
	CreatedAt    time.Time          `json:"created_at,omitzero"`
	IdleDeadline time.Time          `json:"idle_deadline,omitzero"`
	LastSnapshot string             `json:"last_snapshot,omitempty"`
	Seal         string             `json:"seal,omitempty"`
	RestoredFrom string             `json:"restored_from,omitempty"`
	LastError    string             `json:"last_error,omitempty"`
	Network      string             `json:"network,omitempty"`
	NetworkAllow []string           `json:"network_allow,omitempty"`
	Policy       policyJSON         `json:"policy"`
	Parent       cocoonbox.BoxID    `json:"parent,omitempty"`
	ForkedAt     time.Time          `json:"forked_at,omitzero"`
}

type policyJSON struct {
	IdleSeconds          int64 `json:"idle_seconds"`
	Durable              bool  `json:"durable"`
	SnapshotEverySeconds int64 `json:"snapshot_every_seconds"`
	KeepSnapshots        int32 `json:"keep_snapshots"`
	RecordRuns           bool  `json:"record_runs,omitempty"`
}

// mcpPolicyChange reads box_policy's arguments, refusing one it does not know.
func mcpPolicyChange(args map[string]any) (boxsvc.PolicyChange, error) {
	var c boxsvc.PolicyChange
	for k, v := range args {
		switch k {
		case "box":
		case "idle", "snapshot_every", "lease_idle":
			s, ok := v.(string)
			d, err := time.ParseDuration(s) // "0" included
			if !ok || err != nil || d%time.Second != 0 {
				return c, cocoonbox.Invalid(k, fmt.Sprintf(`must be a duration in whole seconds like "30m" or "0", got %v`, v))
			}
			n := int64(d / time.Second)
			switch k {
			case "idle":
				c.IdleSeconds = &n
			case "snapshot_every":
				c.SnapshotEverySeconds = &n
			default:
				c.LeaseIdleSeconds = &n
			}
		case "durable", "record_runs":
			b, ok := v.(bool)
			if !ok {
				return c, cocoonbox.Invalid(k, fmt.Sprintf("must be true or false, got %v", v))
			}
			if k == "durable" {
				c.Durable = &b
			} else {
				c.RecordRuns = &b
			}
		case "keep_snapshots":
			f, ok := v.(float64)
			if !ok || f != float64(int(f)) {
				return c, cocoonbox.Invalid("keep_snapshots", fmt.Sprintf("must be a whole number, got %v", v))
			}
			n := int(f)
			c.KeepSnapshots = &n
		default:
			return c, cocoonbox.Invalid(k, "is not a policy field (idle, durable, snapshot_every, keep_snapshots, lease_idle, record_runs)")
		}
	}
	return c, nil
}

func toBoxJSON(v boxsvc.View) boxJSON {
	p := policyProto(v.Policy)
	return boxJSON{
		ID: v.BoxID, Name: v.Name, State: v.State, Size: v.Size, Owner: v.Owner, Role: v.Role,
		CreatedAt: v.CreatedAt, IdleDeadline: v.IdleDeadline, LastSnapshot: v.LastSnapshot, LastError: v.LastError,
		Seal: v.Seal, RestoredFrom: v.RestoredFrom.SnapshotID, Parent: v.Parent, ForkedAt: v.ForkedAt,
		Network: v.Policy.Network.Policy, NetworkAllow: v.Policy.Network.Allow,
		Policy: policyJSON{IdleSeconds: p.GetIdleSeconds(), Durable: p.GetDurable(), SnapshotEverySeconds: p.GetSnapshotEverySeconds(),
			KeepSnapshots: p.GetKeepSnapshots(), RecordRuns: p.GetRecordRuns()},
	}
}

type fileJSON struct {
	Path          string  `json:"path"`
	Size          int     `json:"size"`
	Mode          string  `json:"mode"`
	Content       *string `json:"content,omitempty"` // nil when the file is not UTF-8
	ContentBase64 string  `json:"content_base64,omitempty"`
}

type snapshotJSON struct {
	ID        string             `json:"id"`
	BoxID     cocoonbox.BoxID    `json:"box_id"`
	ParentID  string             `json:"parent_id,omitempty"`
	Bytes     int64              `json:"bytes"`
	Files     int64              `json:"files"`
	SHA256    string             `json:"sha256"`
	CreatedAt time.Time          `json:"created_at,omitzero"`
	Pruned    []string           `json:"pruned,omitempty"`
	BoxState  cocoonbox.BoxState `json:"box_state"`
}

func toSnapshotJSON(r workflows.SnapshotResult) snapshotJSON {
	sn := r.Snapshot
	return snapshotJSON{
		ID: sn.ID, BoxID: sn.BoxID, ParentID: sn.ParentID, Bytes: sn.Bytes, Files: sn.Files, SHA256: sn.SHA256,
		CreatedAt: sn.CreatedAt, Pruned: r.Pruned, BoxState: r.Status.State,
	}
}
