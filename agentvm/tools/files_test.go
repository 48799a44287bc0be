package tools_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/loomhand/cocoonbox/agentvm/tools"
)

func TestWriteThenReadAndList(t *testing.T) {
	dir := t.TempDir()
	res, err := call(t, tools.WriteFile{Dir: dir}, `{"path":"a/b/c.txt","content":"héllo\n"}`)
	require.NoError(t, err)
	require.False(t, res.IsError, res.Text)
	got, err := os.ReadFile(filepath.Join(dir, "a/b/c.txt"))
	require.NoError(t, err)
	require.Equal(t, "héllo\n", string(got))

	res, err = call(t, tools.ReadFile{Dir: dir}, `{"path":"`+filepath.Join(dir, "a/b/c.txt")+`"}`)
	require.NoError(t, err)
	require.Equal(t, tools.Result{Text: "héllo\n"}, res)

	// An existing file keeps its mode when replaced; no temporary file is left behind.
	require.NoError(t, os.Chmod(filepath.Join(dir, "a/b/c.txt"), 0o600))
	_, err = call(t, tools.WriteFile{Dir: dir}, `{"path":"a/b/c.txt","content":""}`)
	require.NoError(t, err)
	st, err := os.Stat(filepath.Join(dir, "a/b/c.txt"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	require.Zero(t, st.Size())

	require.NoError(t, os.Symlink("c.txt", filepath.Join(dir, "a/b/link")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "a/b/sub"), 0o755))
	res, err = call(t, tools.ListDir{Dir: dir}, `{"path":"a/b"}`)
	require.NoError(t, err)
	require.Equal(t, "c.txt\t0\nlink -> c.txt\nsub/\n", res.Text)
}

func TestFileFailuresAreResults(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		tool tools.Tool
		args string
		want string
	}{
		{tools.ReadFile{Dir: dir}, `{"path":"missing"}`, "no such file"},
		{tools.ReadFile{Dir: dir}, `{"path":"."}`, "is a directory"},
		{tools.ListDir{Dir: dir}, `{"path":"missing"}`, "no such file"},
		{tools.WriteFile{Dir: dir}, `{"path":".","content":"x"}`, "is a directory"},
	} {
		res, err := call(t, c.tool, c.args)
		require.NoError(t, err, c.args)
		require.True(t, res.IsError, c.args)
		require.Contains(t, res.Text, c.want, c.args)
	}

	require.NoError(t, os.WriteFile(filepath.Join(dir, "bin"), []byte{0xff, 0xfe, 0}, 0o644))
	res, err := call(t, tools.ReadFile{Dir: dir}, `{"path":"bin"}`)
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, res.Text, "not UTF-8")
}

func TestReadFileTruncatesAtOneMiB(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big"), []byte(strings.Repeat("x", tools.ReadFileMax+10)), 0o644))
	res, err := call(t, tools.ReadFile{Dir: dir}, `{"path":"big"}`)
	require.NoError(t, err)
	require.False(t, res.IsError)
	require.True(t, strings.HasPrefix(res.Text, strings.Repeat("x", tools.ReadFileMax)+"\n[truncated: the file is 1048586 bytes"), res.Text[tools.ReadFileMax:])
}

func TestFileArgumentsAreValidated(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("x", tools.WriteFileMax+1)
	for _, c := range []struct {
		tool  tools.Tool
		args  string
		field string
	}{
		{tools.ReadFile{Dir: dir}, `{}`, "path"},
		{tools.ReadFile{Dir: dir}, `{"path":3}`, "path"},
		{tools.ListDir{Dir: dir}, `{"path":""}`, "path"},
		{tools.WriteFile{Dir: dir}, `{"path":"f"}`, "content"},
		{tools.WriteFile{Dir: dir}, `{"content":"x"}`, "path"},
		{tools.WriteFile{Dir: dir}, `{"path":"f","content":"` + big + `"}`, "content"},
	} {
		_, err := call(t, c.tool, c.args)
		require.ErrorIs(t, err, tools.ErrInvalid, c.args[:min(len(c.args), 40)])
		require.Contains(t, err.Error(), c.field)
	}
	_, err := os.Stat(filepath.Join(dir, "f"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
