package tools_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/loomhand/cocoonbox/agentvm/tools"
)

func call(t *testing.T, tool tools.Tool, args string) (tools.Result, error) {
	t.Helper()
	return tool.Call(t.Context(), json.RawMessage(args))
}

func TestShellReportsExitCodeAndOutput(t *testing.T) {
	res, err := call(t, tools.Shell{}, `{"command":"echo out; echo err >&2; exit 3"}`)
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, res.Text, "exit code: 3")
	require.Contains(t, res.Text, "--- stdout ---\nout\n")
	require.Contains(t, res.Text, "--- stderr ---\nerr\n")

	res, err = call(t, tools.Shell{}, `{"command":"pwd","cwd":"/tmp"}`)
	require.NoError(t, err)
	require.False(t, res.IsError)
	require.Equal(t, "exit code: 0\n--- stdout ---\n/tmp\n", res.Text)
}

func TestShellTruncatesOutput(t *testing.T) {
	res, err := call(t, tools.Shell{}, `{"command":"head -c 100000 /dev/zero | tr '\\0' a"}`)
	require.NoError(t, err)
	require.Contains(t, res.Text, strings.Repeat("a", tools.ShellMaxOutput))
	require.NotContains(t, res.Text, strings.Repeat("a", tools.ShellMaxOutput+1))
	require.Contains(t, res.Text, "[stdout truncated: 34464 more bytes not shown]")
}

func TestShellValidatesArguments(t *testing.T) {
	for args, field := range map[string]string{
		`{}`:                                     "command",
		`{"command":"  "}`:                       "command",
		`{"command":"ls","timeout_seconds":0}`:   "timeout_seconds",
		`{"command":"ls","timeout_seconds":601}`: "timeout_seconds",
		`{"command":"ls","timeout_seconds":"5"}`: "timeout_seconds",
		`{"command":"ls","bogus":1}`:             "bogus",
		`not json`:                               "invalid",
	} {
		_, err := call(t, tools.Shell{}, args)
		require.ErrorIs(t, err, tools.ErrInvalid, args)
		require.Contains(t, err.Error(), field, args)
	}
}
