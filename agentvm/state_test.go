package agentvm_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/agentvm"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// exportTree runs State.Export and returns the tar, checking the chunk size bound.
func exportTree(t *testing.T, a *testAgent, path string) ([]byte, error) {
	t.Helper()
	stream, err := agentvmv1.NewStateClient(a.conn).Export(withCredential(t.Context(), testCredential), &agentvmv1.ExportRequest{Path: path})
	require.NoError(t, err)
	var buf bytes.Buffer
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return buf.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
		require.LessOrEqual(t, len(c.GetData()), agentvm.StateChunk)
		buf.Write(c.GetData())
	}
}

// importTree runs State.Import with data in odd-sized messages, the path on the first only.
func importTree(t *testing.T, a *testAgent, path string, data []byte) (*agentvmv1.ImportResponse, error) {
	t.Helper()
	stream, err := agentvmv1.NewStateClient(a.conn).Import(withCredential(t.Context(), testCredential))
	require.NoError(t, err)
	req := &agentvmv1.ImportRequest{Path: path}
	for len(data) > 0 || req != nil {
		if req == nil {
			req = &agentvmv1.ImportRequest{}
		}
		n := min(len(data), 100_000)
		req.Data, data = data[:n], data[n:]
		if err := stream.Send(req); err != nil {
			break // the server ended the call; CloseAndRecv says why
		}
		req = nil
	}
	return stream.CloseAndRecv()
}

func stat(t *testing.T, a *testAgent, path string) (*agentvmv1.StatResponse, error) {
	t.Helper()
	return agentvmv1.NewStateClient(a.conn).Stat(withCredential(t.Context(), testCredential), &agentvmv1.StatRequest{Path: path})
}

// entry is what the round trip must keep of one entry of a tree.
type entry struct {
	Mode     fs.FileMode
	MTime    time.Time
	UID, GID uint32
	Link     string
	Data     string
}

func snapshot(t *testing.T, root string) map[string]entry {
	t.Helper()
	m := map[string]entry{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		fi, err := d.Info()
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, p)
		e := entry{Mode: fi.Mode(), MTime: fi.ModTime()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			e.UID, e.GID = st.Uid, st.Gid
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Link, err = os.Readlink(p)
			require.NoError(t, err)
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			e.Data = string(data)
		}
		if rel == "." {
			e.MTime = time.Time{} // the tree's own mtime is the swap's
		}
		m[rel] = e
		return nil
	}))
	return m
}

func TestStateRoundTrip(t *testing.T) {
	a := startAgent(t)
	src := filepath.Join(t.TempDir(), "home")
	big := make([]byte, 700<<10) // several chunks
	for i := range big {
		big[i] = byte(rand.IntN(256))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(src, "proj/src/empty"), 0o755))
	require.NoError(t, os.Chmod(filepath.Join(src, "proj"), 0o750))
	files := map[string]struct {
		data string
		mode fs.FileMode
	}{
		".bashrc":          {"export X=1\n", 0o644},
		"proj/run.sh":      {"#!/bin/sh\necho hi\n", 0o755},
		"proj/secret":      {"s3cret", 0o600},
		"proj/src/big.bin": {string(big), 0o644},
		"proj/empty.txt":   {"", 0o640},
	}
	for name, f := range files {
		require.NoError(t, os.WriteFile(filepath.Join(src, name), []byte(f.data), f.mode))
		require.NoError(t, os.Chmod(filepath.Join(src, name), f.mode))
	}
	require.NoError(t, os.Symlink("run.sh", filepath.Join(src, "proj/run")))
	require.NoError(t, os.Symlink("/etc/hostname", filepath.Join(src, "hostname")))
	require.NoError(t, os.Symlink("nowhere", filepath.Join(src, "dangling")))
	if os.Geteuid() == 0 {
		require.NoError(t, os.Lchown(filepath.Join(src, "proj/secret"), 1234, 5678))
		require.NoError(t, os.Lchown(filepath.Join(src, "proj/run"), 1234, 5678))
	}
	mtime := time.Date(2024, 3, 1, 12, 0, 0, 123456789, time.UTC)
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if d.Type()&fs.ModeSymlink == 0 {
			mtime = mtime.Add(time.Minute)
			return os.Chtimes(p, time.Time{}, mtime)
		}
		return nil
	}))
	want := snapshot(t, src)

	data, err := exportTree(t, a, src)
	require.NoError(t, err)
	srcStat, err := stat(t, a, src)
	require.NoError(t, err)
	require.Equal(t, int64(8), srcStat.GetFiles()) // 5 files and 3 symlinks
	require.Equal(t, int64(len(big)+11+18+6), srcStat.GetBytes())

	// Import over an existing tree: its old contents go.
	dst := filepath.Join(t.TempDir(), "user")
	require.NoError(t, os.MkdirAll(filepath.Join(dst, "old"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dst, "old/stale"), []byte("x"), 0o644))
	resp, err := importTree(t, a, dst, data)
	require.NoError(t, err)
	require.Equal(t, srcStat.GetFiles(), resp.GetFiles())
	require.Equal(t, srcStat.GetBytes(), resp.GetBytes())
	require.Equal(t, want, snapshot(t, dst))
	leftovers, err := filepath.Glob(filepath.Join(filepath.Dir(dst), ".user.*"))
	require.NoError(t, err)
	require.Empty(t, leftovers)

	// Into a path that does not exist yet.
	fresh := filepath.Join(t.TempDir(), "a", "b")
	_, err = importTree(t, a, fresh, data)
	require.NoError(t, err)
	require.Equal(t, want, snapshot(t, fresh))
}

func TestStateImportRefusesUnsafeEntries(t *testing.T) {
	a := startAgent(t)
	outside := t.TempDir()
	type ent struct {
		name, link string
		typ        byte
	}
	cases := map[string][]ent{
		"dotdot":          {{name: "../escaped", typ: tar.TypeReg}},
		"dotdot inside":   {{name: "a/../../escaped", typ: tar.TypeReg}},
		"absolute":        {{name: filepath.Join(outside, "escaped"), typ: tar.TypeReg}},
		"through symlink": {{name: "s", link: outside, typ: tar.TypeSymlink}, {name: "s/escaped", typ: tar.TypeReg}},
		"hard link out":   {{name: "h", link: "../../etc/passwd", typ: tar.TypeLink}},
		"root as file":    {{name: ".", typ: tar.TypeReg}},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			require.NoError(t, tw.WriteHeader(&tar.Header{Name: "fine.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2}))
			_, _ = tw.Write([]byte("ok"))
			for _, e := range entries {
				hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644}
				if e.typ == tar.TypeReg {
					hdr.Size = 5
				}
				require.NoError(t, tw.WriteHeader(hdr))
				if e.typ == tar.TypeReg {
					_, _ = tw.Write([]byte("pwned"))
				}
			}
			require.NoError(t, tw.Close())

			dst := filepath.Join(t.TempDir(), "user")
			require.NoError(t, os.MkdirAll(dst, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dst, "keep"), []byte("old"), 0o644))
			_, err := importTree(t, a, dst, buf.Bytes())
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

			got, err := os.ReadFile(filepath.Join(dst, "keep"))
			require.NoError(t, err, "the old tree is intact")
			require.Equal(t, "old", string(got))
			require.NoFileExists(t, filepath.Join(dst, "fine.txt"))
			require.NoFileExists(t, filepath.Join(outside, "escaped"))
			require.NoFileExists(t, filepath.Join(filepath.Dir(dst), "escaped"))
			leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".user.*"))
			require.Empty(t, leftovers)
		})
	}

	// A stream that breaks off mid-file leaves the old tree too.
	dst := filepath.Join(t.TempDir(), "user")
	require.NoError(t, os.MkdirAll(dst, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dst, "keep"), []byte("old"), 0o644))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 20}))
	_, err := importTree(t, a, dst, buf.Bytes())
	require.Error(t, err)
	require.FileExists(t, filepath.Join(dst, "keep"))
	require.NoFileExists(t, filepath.Join(dst, "big"))
}

func TestStatePaths(t *testing.T) {
	a := startAgent(t)
	missing := filepath.Join(t.TempDir(), "missing")
	for _, p := range []string{"", "home/user", "./x"} {
		_, err := stat(t, a, p)
		require.Equal(t, codes.InvalidArgument, status.Code(err), "Stat %q: %v", p, err)
		_, err = exportTree(t, a, p)
		require.Equal(t, codes.InvalidArgument, status.Code(err), "Export %q: %v", p, err)
		_, err = importTree(t, a, p, nil)
		require.Equal(t, codes.InvalidArgument, status.Code(err), "Import %q: %v", p, err)
	}
	_, err := importTree(t, a, "/", nil)
	require.Equal(t, codes.InvalidArgument, status.Code(err), "Import /: %v", err)
	_, err = stat(t, a, missing)
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	_, err = exportTree(t, a, missing)
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	// State is behind the credential like every service.
	_, err = agentvmv1.NewStateClient(a.conn).Stat(t.Context(), &agentvmv1.StatRequest{Path: "/"})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
}

func TestStateImportKeepsTheTreeItselfWithoutARootEntry(t *testing.T) {
	a := startAgent(t)
	dst := filepath.Join(t.TempDir(), "user")
	require.NoError(t, os.Mkdir(dst, 0o751))
	require.NoError(t, os.Chmod(dst, 0o751))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o600, Size: 1}))
	_, _ = tw.Write([]byte("x"))
	require.NoError(t, tw.Close())
	resp, err := importTree(t, a, dst, buf.Bytes())
	require.NoError(t, err)
	require.Equal(t, int64(1), resp.GetFiles())
	fi, err := os.Stat(dst)
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o751), fi.Mode().Perm())

	_, err = importTree(t, a, dst, bytes.Repeat([]byte("not a tar "), 100))
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.FileExists(t, filepath.Join(dst, "d/f"))
}
