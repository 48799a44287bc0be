package api

import (
	"context"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/internal/boxsvc"
)

// mcpRunWait bounds how long agent_run with wait holds the call open: MCP clients time tool
// calls out, and a longer run is better followed with agent_status.
var mcpRunWait = 5 * time.Minute

func runArg() mcp.ToolOption {
	return mcp.WithString("run", mcp.Required(), mcp.MinLength(1),
		mcp.Description("The run's ID (run_…), as agent_run returned it."))
}

// mcpAgentTools are the tools on a box's resident agent, thin adapters over the same service
// calls as AgentService.
func (s *Server) mcpAgentTools() []mcpTool {
	return []mcpTool{{
		tool: mcp.NewTool("agent_run",
			mcp.WithDescription("Give a box's resident agent a task in plain words. The agent works in the box "+
				"(shell, files, desktop) on its own until it is done; the run survives restarts and can be "+
				"followed with agent_status. With wait, the call returns when the run ends (or after 5 minutes, "+
				"still running) with the agent's final answer in result."),
			boxArg(),
			mcp.WithString("task", mcp.Required(), mcp.MinLength(1), mcp.Description("What the agent should do, in plain words.")),
			mcp.WithString("model", mcp.Description("The model to run on, as the gateway names it; the server's default when omitted.")),
			mcp.WithInteger("max_steps", mcp.Min(1), mcp.Max(boxsvc.MaxRunSteps),
				mcp.Description("Stop the run after this many model turns; the server's default when omitted.")),
			mcp.WithInteger("max_tokens", mcp.Min(0),
				mcp.Description("Stop the run before a model call once its calls have used this many input and output tokens; no bound when omitted.")),
			mcp.WithBoolean("wait", mcp.DefaultBool(false),
				mcp.Description("Wait for the run to end (at most 5 minutes) and return its result; false returns at once.")),
			mcp.WithDestructiveHintAnnotation(true), mcp.WithOpenWorldHintAnnotation(true),
		),
		run: s.onBox(func(ctx context.Context, caller string, id cocoonbox.BoxID, req mcp.CallToolRequest) (any, error) {
			run, err := s.boxes.StartRun(ctx, caller, id, boxsvc.RunRequest{
				Task: req.GetString("task", ""), Model: req.GetString("model", ""), MaxSteps: req.GetInt("max_steps", 0),
				MaxTokens: int64(req.GetInt("max_tokens", 0)),
			})
			if err != nil {
				return nil, err
			}
			if !req.GetBool("wait", false) {
				return toRunJSON(run, false), nil
			}
			return s.awaitRun(ctx, caller, run)
		}),
	}, {
		tool: mcp.NewTool("agent_status",
			mcp.WithDescription("Show an agent run: its state (running, waiting while a person holds the desktop, "+
				"succeeded, failed, cancelled), a one-line summary of every step, and once it ended the agent's "+
				"final answer (result) or why it failed (error)."),
			runArg(),
			mcp.WithReadOnlyHintAnnotation(true), mcp.WithDestructiveHintAnnotation(false),
		),
		run: func(ctx context.Context, caller string, req mcp.CallToolRequest) (any, error) {
			run, err := s.boxes.GetRun(ctx, caller, req.GetString("run", ""))
			if err != nil {
				return nil, err
			}
			return toRunJSON(run, true), nil
		},
	}, {
		tool: mcp.NewTool("agent_message",
			mcp.WithDescription("Tell a running agent something: an answer to its question, a correction, more "+
				"to do. Its next step reads the message. A run that ended takes no messages; start another."),
			runArg(),
			mcp.WithString("text", mcp.Required(), mcp.MinLength(1), mcp.Description("The message, in plain words.")),
			mcp.WithDestructiveHintAnnotation(false),
		),
		run: func(ctx context.Context, caller string, req mcp.CallToolRequest) (any, error) {
			runID := req.GetString("run", "")
			if err := s.boxes.SendMessage(ctx, caller, runID, req.GetString("text", "")); err != nil {
				return nil, err
			}
			return map[string]any{"run": runID, "delivered": true}, nil
		},
	}}
}

// awaitRun follows a started run until it ends or mcpRunWait passes, and returns it as it then
// is; the run goes on either way.
func (s *Server) awaitRun(ctx context.Context, caller string, run boxsvc.Run) (any, error) {
	wctx, cancel := context.WithTimeout(ctx, mcpRunWait)
	defer cancel()
	last := run
	err := s.boxes.WatchRun(wctx, caller, run.ID, func(e boxsvc.RunEvent) error {
		if e.Run != nil {
			last = *e.Run
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	out := toRunJSON(last, false)
	if last.EndedAt.IsZero() {
		out.Note = fmt.Sprintf("still %s after %s; follow it with agent_status", last.State, mcpRunWait)
	}
	return out, nil
}

// runJSON is an agent run as MCP tools show it.
type runJSON struct {
	ID        string                  `json:"id"`
	BoxID     cocoonbox.BoxID         `json:"box_id"`
	State     cocoonbox.AgentRunState `json:"state"`
	Task      string                  `json:"task"`
	Model     string                  `json:"model"`
	Error     string                  `json:"error,omitempty"`
	Result    string                  `json:"result,omitempty"`
	StepsDone int                     `json:"steps_done"`
	MaxTokens int64                   `json:"max_tokens,omitempty"`
	Tokens    int64                   `json:"tokens_used,omitempty"`
	Steps     []stepJSON              `json:"steps,omitempty"`
	CreatedAt time.Time               `json:"created_at,omitzero"`
	EndedAt   time.Time               `json:"ended_at,omitzero"`
	Note      string                  `json:"note,omitempty"`
}

// stepJSON is a step in brief: an agent reads the summaries, not the transcript.
type stepJSON struct {
	Number  int      `json:"number"`
	Summary string   `json:"summary"`
	Message string   `json:"message,omitempty"`
	Errors  []string `json:"failed_tools,omitempty"`
}

func toRunJSON(r boxsvc.Run, steps bool) runJSON {
	out := runJSON{
		ID: r.ID, BoxID: r.BoxID, State: r.State, Task: r.Task, Model: r.Model, Error: r.Error,
		Result: r.Result, StepsDone: r.StepsDone, CreatedAt: r.CreatedAt, EndedAt: r.EndedAt,
		MaxTokens: r.MaxTokens, Tokens: r.TokensUsed,
	}
	if !steps {
		return out
	}
	for _, st := range r.Steps {
		rec := st.Record()
		sj := stepJSON{Number: st.Step, Summary: st.Summary, Message: rec.Message}
		for _, tc := range rec.ToolCalls {
			if tc.IsError {
				sj.Errors = append(sj.Errors, tc.Name)
			}
		}
		out.Steps = append(out.Steps, sj)
	}
	return out
}
