package agentvm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/loomhand/cocoonbox/agentvm/model/modeltest"
)

// TestScriptRunIsOneTurn: a script of ten actions runs in one step, one model call, in order;
// a failing action stops it and says which.
func TestScriptRunIsOneTurn(t *testing.T) {
	dir := t.TempDir()
	var actions []map[string]any
	for i := range 9 {
		actions = append(actions, map[string]any{"tool": "shell", "args": map[string]any{"command": "echo " + string(rune('a'+i)) + " >> " + filepath.Join(dir, "log")}})
	}
	actions = append(actions, map[string]any{"tool": "wait", "args": map[string]any{"seconds": 0.01}})
	args, _ := json.Marshal(map[string]any{"actions": actions})
	srv := modeltest.NewServer(t, testKey,
		modeltest.Calls(modeltest.Call("script_run", string(args))),
		modeltest.Calls(modeltest.Call("script_run", `{"actions":[{"tool":"shell","args":{"command":"false"}},{"tool":"shell","args":{"command":"echo never"}}]}`)))
	var n atomic.Int32
	loop := newLoop(dir, &n)
	resp, err := loop.Step(t.Context(), stepRequest(srv, "openai", 1, nil))
	require.NoError(t, err)
	require.Len(t, srv.Requests(), 1, "one model turn")
	require.Len(t, resp.ToolCalls, 1)
	require.False(t, resp.ToolCalls[0].IsError, resp.ToolCalls[0].Result)
	require.Contains(t, resp.ToolCalls[0].Result, "10. wait: waited 0.01s")
	log, err := os.ReadFile(filepath.Join(dir, "log"))
	require.NoError(t, err)
	require.Equal(t, "a\nb\nc\nd\ne\nf\ng\nh\ni\n", string(log))
	require.EqualValues(t, 9, n.Load())

	resp, err = loop.Step(t.Context(), stepRequest(srv, "openai", 2, resp.Messages))
	require.NoError(t, err)
	res := resp.ToolCalls[0]
	require.True(t, res.IsError)
	require.Contains(t, res.Result, "stopped at action 1 of 2")
	require.False(t, strings.Contains(res.Result, "2. shell"), "the action after the failure ran: %s", res.Result)
}
