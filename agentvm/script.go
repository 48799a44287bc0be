package agentvm

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/loomhand/cocoonbox/agentvm/model"
	"github.com/loomhand/cocoonbox/agentvm/tools"
)

// ScriptRun is the tool that runs a batch of actions in one model turn, with a screenshot at the
// end: a sequence the model already knows costs one turn instead of one per action.
const ScriptRun = "script_run"

// Bounds of a script.
const (
	maxScriptActions = 20
	maxScriptWait    = 10 * time.Second
	// scriptWait is the pseudo-tool of a pause between actions.
	scriptWait = "wait"
)

var scriptRunTool = model.Tool{
	Name: ScriptRun,
	Description: "Run up to 20 actions in order in this one turn, then take a screenshot of the desktop. " +
		"Each action is {\"tool\": NAME, \"args\": {...}} for one of the other tools (desktop_click, desktop_type, " +
		"desktop_key, desktop_drag, desktop_scroll, desktop_move, shell, write_file, ...) with that tool's " +
		"arguments, or {\"tool\": \"wait\", \"args\": {\"seconds\": 1}} (at most 10). It stops at the first action " +
		"that fails and says which. Use it when you know the next several actions, to save turns.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"actions":{"type":"array","minItems":1,"maxItems":20,` +
		`"items":{"type":"object","properties":{"tool":{"type":"string"},"args":{"type":"object"}},"required":["tool"],` +
		`"additionalProperties":false}}},"required":["actions"],"additionalProperties":false}`),
}

// script runs a script_run call: its actions in order, then a screenshot. refused is set when an
// action acts on the desktop while a person holds it (the script stops there).
func (l *Loop) script(ctx context.Context, args json.RawMessage) (res tools.Result, refused bool, err error) {
	var in struct {
		Actions []struct {
			Tool string          `json:"tool"`
			Args json.RawMessage `json:"args"`
		} `json:"actions"`
	}
	if err := json.Unmarshal(args, &in); err != nil {
		return tools.Result{Text: "script_run: arguments must be {\"actions\": [{\"tool\": ..., \"args\": {...}}, ...]}", IsError: true}, false, nil
	}
	switch {
	case len(in.Actions) == 0:
		return tools.Result{Text: "script_run: actions: at least one is required", IsError: true}, false, nil
	case len(in.Actions) > maxScriptActions:
		return tools.Result{Text: fmt.Sprintf("script_run: actions: %d; at most %d a script", len(in.Actions), maxScriptActions), IsError: true}, false, nil
	}
	var out strings.Builder
	failed := false
	for i, a := range in.Actions {
		args := a.Args
		if len(args) == 0 {
			args = json.RawMessage(`{}`)
		}
		var r tools.Result
		switch {
		case a.Tool == scriptWait:
			r = l.wait(ctx, args)
		case a.Tool == ScriptRun || a.Tool == AskUser:
			r = tools.Result{Text: a.Tool + " cannot run inside a script", IsError: true}
		case l.refuses(a.Tool):
			r, refused = tools.Result{Text: RefusedWhileControlled, IsError: true}, true
		default:
			if r, err = l.call(ctx, model.ToolCall{Name: a.Tool, Arguments: args}); err != nil {
				return tools.Result{}, refused, err
			}
		}
		fmt.Fprintf(&out, "%d. %s: %s\n", i+1, a.Tool, strings.TrimSpace(cutText(r.Text, 500)))
		res.Images, res.Thumbs = append(res.Images, r.Images...), append(res.Thumbs, r.Thumbs...)
		if r.IsError {
			fmt.Fprintf(&out, "stopped at action %d of %d: it failed\n", i+1, len(in.Actions))
			failed = true
			break
		}
	}
	if shot, err := l.call(ctx, model.ToolCall{Name: screenshotTool, Arguments: json.RawMessage(`{}`)}); err != nil {
		return tools.Result{}, refused, err
	} else if !shot.IsError {
		res.Images, res.Thumbs = append(res.Images, shot.Images...), append(res.Thumbs, shot.Thumbs...)
		out.WriteString("the screenshot shows the desktop after the script\n")
	}
	res.Text, res.IsError = strings.TrimSpace(out.String()), failed
	return res, refused, nil
}

// wait is the script's pause.
func (l *Loop) wait(ctx context.Context, args json.RawMessage) tools.Result {
	var a struct {
		Seconds float64 `json:"seconds"`
	}
	if err := json.Unmarshal(args, &a); err != nil || a.Seconds < 0 || a.Seconds > maxScriptWait.Seconds() {
		return tools.Result{Text: fmt.Sprintf("wait: seconds must be from 0 to %g", maxScriptWait.Seconds()), IsError: true}
	}
	t := time.NewTimer(time.Duration(a.Seconds * float64(time.Second)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return tools.Result{Text: "wait: the step ended", IsError: true}
	case <-t.C:
		return tools.Result{Text: fmt.Sprintf("waited %gs", a.Seconds)}
	}
}

// cutText is s cut to n bytes at a character boundary, marked when cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
