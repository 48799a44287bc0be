package boxlink_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/loomhand/cocoonbox"
	"github.com/loomhand/cocoonbox/agentvm"
	"github.com/loomhand/cocoonbox/agentvm/wire"
	"github.com/loomhand/cocoonbox/internal/boxlink"
	"github.com/loomhand/cocoonbox/internal/sandbox"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

const fileLinkCred = "file-link-credential"

// linkBox is a sandbox whose relay to wire.LinkPort reaches addr.
type linkBox struct {
	sandbox.Client
	addr string
}

func (b linkBox) DialPort(ctx context.Context, _ sandbox.SandboxRef, port int) (sandbox.Conn, error) {
	if port != wire.LinkPort {
		return nil, &sandbox.Error{Op: "relay", Status: 502, Message: "nothing listens", Kind: sandbox.ErrUnavailable}
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", b.addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// startFileAgent serves the real agent's links and returns a link that reaches them.
func startFileAgent(t *testing.T) (*boxlink.Link, boxlink.Box) {
	t.Helper()
	j, err := agentvm.OpenJournal(filepath.Join(t.TempDir(), "journal"))
	require.NoError(t, err)
	srv, err := agentvm.NewServer(agentvm.Config{Credential: fileLinkCred, Loop: &agentvm.Loop{Links: agentvm.NewLinks()}, Journal: j})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- srv.ServeLinks(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		require.NoError(t, <-done)
	})
	return &boxlink.Link{Sandbox: linkBox{addr: lis.Addr().String()}},
		boxlink.Box{ID: "bx_files", Ref: sandbox.SandboxRef{ID: "sb_1"}, Cred: fileLinkCred}
}

// chunks yields data in pieces of n bytes, then io.EOF.
func chunks(data []byte, n int) func() ([]byte, error) {
	return func() ([]byte, error) {
		if len(data) == 0 {
			return nil, io.EOF
		}
		c := data[:min(n, len(data))]
		data = data[len(c):]
		return c, nil
	}
}

// TestUploadOverFileLink: a file sent over a file link arrives whole, in pieces smaller and
// larger than a frame, with its mode; the answer is the written file.
func TestUploadOverFileLink(t *testing.T) {
	link, box := startFileAgent(t)
	data := make([]byte, 2*wire.MaxFileFrame+12345)
	_, _ = rand.Read(data)
	p := filepath.Join(t.TempDir(), "new", "blob.bin")
	for _, piece := range []int{1 << 20, wire.MaxFileFrame + 1} {
		fi, err := link.Upload(t.Context(), box, &agentvmv1.WriteFileRequest{Path: p, Mode: 0o640, Size: int64(len(data))}, chunks(data, piece))
		require.NoError(t, err)
		require.EqualValues(t, len(data), fi.GetSize())
		require.EqualValues(t, 0o640, fi.GetMode())
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		require.True(t, bytes.Equal(data, got), "the file's bytes")
	}
	// Unknown size and an empty file.
	fi, err := link.Upload(t.Context(), box, &agentvmv1.WriteFileRequest{Path: p, Size: -1}, chunks(nil, 1))
	require.NoError(t, err)
	require.EqualValues(t, 0, fi.GetSize())
}

// TestUploadOverFileLinkKeepsTheOldFile: an upload the agent refuses (more bytes than
// announced, fewer, a directory as the target) or whose sender fails halfway changes nothing,
// leaves no temporary file, and says why: the agent's reason, not a broken link, even when
// the refusal comes while much is still being sent.
func TestUploadOverFileLinkKeepsTheOldFile(t *testing.T) {
	link, box := startFileAgent(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "keep.txt")
	require.NoError(t, os.WriteFile(p, []byte("the old one"), 0o644))
	big := make([]byte, 64<<20)
	upload := func(path string, size int64, recv func() ([]byte, error)) error {
		_, err := link.Upload(t.Context(), box, &agentvmv1.WriteFileRequest{Path: path, Size: size}, recv)
		return err
	}

	err := upload(p, 1<<20, chunks(big, 1<<20))
	require.Equal(t, cocoonbox.EInvalid, cocoonbox.ErrorCode(err), "%v", err)
	require.Contains(t, cocoonbox.ErrorMessage(err), "more than the 1048576 bytes it announced")

	err = upload(p, 100, chunks([]byte("short"), 5))
	require.Equal(t, cocoonbox.EInvalid, cocoonbox.ErrorCode(err), "%v", err)
	require.Contains(t, cocoonbox.ErrorMessage(err), "ended after 5 of the 100 bytes")

	err = upload(dir, -1, chunks(big, 1<<20))
	require.Equal(t, cocoonbox.EInvalid, cocoonbox.ErrorCode(err), "%v", err)
	require.Contains(t, cocoonbox.ErrorMessage(err), "is a directory")

	failing := errors.New("the client's disk failed")
	sent := 0
	err = upload(p, int64(len(big)), func() ([]byte, error) {
		if sent >= 8 {
			return nil, failing
		}
		sent++
		return big[:1<<20], nil
	})
	require.ErrorIs(t, err, failing)
	requireKept(t, dir, p)
}

// TestUploadWithoutFileLink: an agent that refuses the file link (a wrong credential, or an
// agent older than file links, which answers ERR to a preamble it does not know) is
// ErrNoFileLink before any byte is read, so the caller can send the file over gRPC instead.
func TestUploadWithoutFileLink(t *testing.T) {
	link, box := startFileAgent(t)
	never := func() ([]byte, error) {
		t.Error("recv was called")
		return nil, io.EOF
	}
	wrong := box
	wrong.Cred = "not-it"
	_, err := link.Upload(t.Context(), wrong, &agentvmv1.WriteFileRequest{Path: "/tmp/x", Size: 1}, never)
	require.ErrorIs(t, err, boxlink.ErrNoFileLink)
	require.Contains(t, err.Error(), "invalid credential")

	old, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { old.Close() })
	go func() {
		for {
			c, err := old.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("ERR bad preamble\n"))
			_ = c.Close()
		}
	}()
	oldLink := &boxlink.Link{Sandbox: linkBox{addr: old.Addr().String()}}
	_, err = oldLink.Upload(t.Context(), box, &agentvmv1.WriteFileRequest{Path: "/tmp/x", Size: 1}, never)
	require.ErrorIs(t, err, boxlink.ErrNoFileLink)
}

// TestUploadOverFileLinkToAFullDisk: an upload that fills the disk it is written to says the
// disk is full (resource_exhausted), not that the link broke, and leaves the old file and no
// temporary one. The agent copies a link's frames to the file by splice, whose error does not
// say which end failed.
func TestUploadOverFileLinkToAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root (CI runs as root)")
	}
	link, box := startFileAgent(t)
	dir := t.TempDir()
	require.NoError(t, unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	p := filepath.Join(dir, "keep.txt")
	require.NoError(t, os.WriteFile(p, []byte("the old one"), 0o644))
	big := make([]byte, 4<<20)
	_, err := link.Upload(t.Context(), box, &agentvmv1.WriteFileRequest{Path: p, Size: int64(len(big))}, chunks(big, 1<<20))
	require.Equal(t, cocoonbox.EResourceExhausted, cocoonbox.ErrorCode(err), "%v", err)
	require.Contains(t, cocoonbox.ErrorMessage(err), "the box's disk is full")
	requireKept(t, dir, p)
}

// requireKept checks that p, the one file in dir, still holds "the old one" and that no
// temporary file of a failed upload is left beside it.
func requireKept(t *testing.T, dir, p string) {
	t.Helper()
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, "the old one", string(got))
	require.Eventually(t, func() bool {
		entries, _ := os.ReadDir(dir)
		return len(entries) == 1
	}, 10*time.Second, 20*time.Millisecond, "no temporary file is left")
}
