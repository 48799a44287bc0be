package agentvm_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// processResult is what a Process call gave back.
type processResult struct {
	stdout, stderr string
	exited         bool
	code           int32
	err            error
}

// collect reads a Process call's output to its end.
func collect(stream grpc.BidiStreamingClient[agentvmv1.ProcessInput, agentvmv1.ExecOutput]) processResult {
	var r processResult
	var out, errOut bytes.Buffer
	for {
		msg, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.err = err
			}
			break
		}
		out.Write(msg.GetStdout())
		errOut.Write(msg.GetStderr())
		if msg.GetExited() {
			r.exited, r.code = true, msg.GetExitCode()
		}
	}
	r.stdout, r.stderr = out.String(), errOut.String()
	return r
}

func (a *testAgent) process(t *testing.T, start *agentvmv1.ProcessStart, in ...*agentvmv1.ProcessInput) grpc.BidiStreamingClient[agentvmv1.ProcessInput, agentvmv1.ExecOutput] {
	t.Helper()
	stream, err := agentvmv1.NewSessionClient(a.conn).Process(withCredential(t.Context(), testCredential))
	require.NoError(t, err)
	require.NoError(t, stream.Send(&agentvmv1.ProcessInput{Start: start}))
	for _, m := range in {
		require.NoError(t, stream.Send(m))
	}
	return stream
}

// TestProcessStreamsStdinThrough: input streamed in reaches the command, whose output and exit
// code come back; the input's end is the command's end-of-file.
func TestProcessStreamsStdinThrough(t *testing.T) {
	a := startAgent(t)
	s := a.process(t, &agentvmv1.ProcessStart{Argv: []string{"sh", "-c", "wc -c; echo oops >&2; exit 3"}, User: "root"},
		&agentvmv1.ProcessInput{Stdin: []byte("hello, ")}, &agentvmv1.ProcessInput{Stdin: []byte("box")}, &agentvmv1.ProcessInput{StdinEof: true})
	r := collect(s)
	require.NoError(t, r.err)
	require.Equal(t, "10", strings.TrimSpace(r.stdout))
	require.Equal(t, "oops\n", r.stderr)
	require.True(t, r.exited)
	require.EqualValues(t, 3, r.code)
}

// TestProcessOutputArrivesBeforeTheEnd: the first line of a long command arrives while it runs.
func TestProcessOutputArrivesBeforeTheEnd(t *testing.T) {
	a := startAgent(t)
	s := a.process(t, &agentvmv1.ProcessStart{Argv: []string{"sh", "-c", "echo first; sleep 30"}, User: "root"})
	msg, err := s.Recv()
	require.NoError(t, err)
	require.True(t, msg.GetStarted(), "the first answer says the command runs")
	msg, err = s.Recv()
	require.NoError(t, err)
	require.Equal(t, "first\n", string(msg.GetStdout()))
	require.NoError(t, s.Send(&agentvmv1.ProcessInput{Signal: "INT"}))
	r := collect(s)
	require.NoError(t, r.err)
	require.True(t, r.exited)
	require.EqualValues(t, -1, r.code, "killed by SIGINT")
}

// TestProcessOnATerminal: a tty command sees a terminal of the size asked, then of a resize, and
// the terminal's ^C interrupts what runs in the foreground.
func TestProcessOnATerminal(t *testing.T) {
	a := startAgent(t)
	s := a.process(t, &agentvmv1.ProcessStart{Tty: &agentvmv1.WindowSize{Rows: 33, Cols: 101}, User: "root",
		Argv: []string{"sh", "-c", `stty size; [ -t 0 ] && echo tty; echo "TERM=$TERM"; read line; stty size; trap 'echo interrupted; exit 7' INT; echo armed; sleep 30 & wait`}})
	var out strings.Builder
	read := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), want) {
			require.True(t, time.Now().Before(deadline), "waiting for %q in %q", want, out.String())
			msg, err := s.Recv()
			require.NoError(t, err)
			out.Write(msg.GetStdout())
			require.Empty(t, msg.GetStderr(), "a terminal has no separate stderr")
		}
	}
	read("TERM=xterm-256color")
	require.Contains(t, out.String(), "33 101")
	require.Contains(t, out.String(), "tty")
	require.NoError(t, s.Send(&agentvmv1.ProcessInput{Resize: &agentvmv1.WindowSize{Rows: 40, Cols: 120}}))
	require.NoError(t, s.Send(&agentvmv1.ProcessInput{Stdin: []byte("go\n")}))
	read("armed")
	require.Contains(t, out.String(), "40 120")
	require.NoError(t, s.Send(&agentvmv1.ProcessInput{Stdin: []byte{3}})) // ^C, as typed
	r := collect(s)
	require.NoError(t, r.err)
	require.Contains(t, r.stdout, "interrupted")
	require.EqualValues(t, 7, r.code)
}

// TestProcessHoldsAResize: a program that reads the terminal's size and writes the same size back
// a moment later, as readline does each time it starts a line, undoes a resize that lands in
// between; the agent sets the size again, so the terminal keeps the caller's window.
func TestProcessHoldsAResize(t *testing.T) {
	a := startAgent(t)
	s := a.process(t, &agentvmv1.ProcessStart{Tty: &agentvmv1.WindowSize{Rows: 33, Cols: 101}, User: "root",
		Argv: []string{"sh", "-c", `set -- $(stty size); echo read; sleep 0.2; stty rows $1 cols $2; sleep 1.5; echo "now $(stty size)"`}})
	var out strings.Builder
	for !strings.Contains(out.String(), "read") {
		msg, err := s.Recv()
		require.NoError(t, err)
		out.Write(msg.GetStdout())
	}
	require.NoError(t, s.Send(&agentvmv1.ProcessInput{Resize: &agentvmv1.WindowSize{Rows: 40, Cols: 120}}))
	r := collect(s)
	require.NoError(t, r.err)
	require.Contains(t, r.stdout, "now 40 120", "the size written back over the resize was set again")
}

// TestProcessRefusesBadInput: each bad message ends the call with an error naming its field.
func TestProcessRefusesBadInput(t *testing.T) {
	a := startAgent(t)
	for name, c := range map[string]struct {
		start *agentvmv1.ProcessStart
		in    []*agentvmv1.ProcessInput
		want  string
	}{
		"no start":        {nil, nil, "start:"},
		"tty 0x0":         {&agentvmv1.ProcessStart{Argv: []string{"true"}, Tty: &agentvmv1.WindowSize{}}, nil, "tty: rows and cols must be 1 to 10000, got 0x0"},
		"resize 0x0":      {&agentvmv1.ProcessStart{Argv: []string{"sleep", "30"}, Tty: &agentvmv1.WindowSize{Rows: 5, Cols: 5}}, []*agentvmv1.ProcessInput{{Resize: &agentvmv1.WindowSize{}}}, "resize: rows and cols"},
		"stdin after eof": {&agentvmv1.ProcessStart{Argv: []string{"sleep", "30"}}, []*agentvmv1.ProcessInput{{StdinEof: true}, {Stdin: []byte("x")}}, "stdin: the command's input was closed"},
		"signal":          {&agentvmv1.ProcessStart{Argv: []string{"sleep", "30"}}, []*agentvmv1.ProcessInput{{Signal: "USR9"}}, "signal: want INT"},
		"no command":      {&agentvmv1.ProcessStart{Argv: []string{"no-such-command-here"}}, nil, `argv: "no-such-command-here" is not a command`},
		"relative cwd":    {&agentvmv1.ProcessStart{Argv: []string{"true"}, Cwd: "tmp"}, nil, "cwd: must be an absolute path"},
		"missing cwd":     {&agentvmv1.ProcessStart{Argv: []string{"true"}, Cwd: "/no/such/dir"}, nil, `cwd: "/no/such/dir" is not a directory`},
		"unknown user":    {&agentvmv1.ProcessStart{Argv: []string{"true"}, User: "nobody-here"}, nil, `user: "nobody-here" is not a user`},
	} {
		t.Run(name, func(t *testing.T) {
			stream, err := agentvmv1.NewSessionClient(a.conn).Process(withCredential(t.Context(), testCredential))
			require.NoError(t, err)
			require.NoError(t, stream.Send(&agentvmv1.ProcessInput{Start: c.start}))
			for _, m := range c.in {
				_ = stream.Send(m)
			}
			r := collect(stream)
			require.Equal(t, codes.InvalidArgument, status.Code(r.err), "%v", r.err)
			require.Contains(t, status.Convert(r.err).Message(), c.want)
		})
	}
}

func (a *testAgent) session() agentvmv1.SessionClient { return agentvmv1.NewSessionClient(a.conn) }

// writeFile streams data into path in chunks, announcing size.
func (a *testAgent) writeFile(t *testing.T, path string, data []byte, size int64, mode uint32) (*agentvmv1.FileInfo, error) {
	t.Helper()
	w, err := a.session().WriteFile(withCredential(t.Context(), testCredential))
	require.NoError(t, err)
	require.NoError(t, w.Send(&agentvmv1.WriteFileRequest{Path: path, Size: size, Mode: mode}))
	for i := 0; i < len(data); i += 100 << 10 {
		if err := w.Send(&agentvmv1.WriteFileRequest{Data: data[i:min(i+100<<10, len(data))]}); err != nil {
			break
		}
	}
	return w.CloseAndRecv()
}

func (a *testAgent) readFile(t *testing.T, path string) (*agentvmv1.FileInfo, []byte, error) {
	t.Helper()
	r, err := a.session().ReadFile(withCredential(t.Context(), testCredential), &agentvmv1.ReadFileRequest{Path: path})
	require.NoError(t, err)
	var info *agentvmv1.FileInfo
	var buf bytes.Buffer
	for {
		msg, err := r.Recv()
		if errors.Is(err, io.EOF) {
			return info, buf.Bytes(), nil
		} else if err != nil {
			return nil, nil, err
		}
		if msg.GetInfo() != nil {
			info = msg.GetInfo()
		}
		buf.Write(msg.GetData())
	}
}

// TestFilesRoundTrip: a file of several megabytes goes in and comes out byte-exact, with its
// directories made, its mode kept, and a listing and a stat that describe it.
func TestFilesRoundTrip(t *testing.T) {
	a := startAgent(t)
	data := make([]byte, 5<<20+123)
	_, _ = rand.Read(data)
	p := filepath.Join(t.TempDir(), "a", "b", "blob.bin")
	info, err := a.writeFile(t, p, data, int64(len(data)), 0o600)
	require.NoError(t, err)
	require.Equal(t, "file", info.GetType())
	require.EqualValues(t, len(data), info.GetSize())
	require.EqualValues(t, 0o600, info.GetMode())
	got, back, err := a.readFile(t, p)
	require.NoError(t, err)
	require.EqualValues(t, len(data), got.GetSize())
	require.Equal(t, sha256.Sum256(data), sha256.Sum256(back))

	// A replacement keeps the mode when none is given.
	info, err = a.writeFile(t, p, []byte("short"), -1, 0)
	require.NoError(t, err)
	require.EqualValues(t, 0o600, info.GetMode())

	require.NoError(t, os.Symlink("blob.bin", filepath.Join(filepath.Dir(p), "link")))
	root := filepath.Dir(filepath.Dir(p))
	list := func(recursive bool) []string {
		s, err := a.session().ListFiles(withCredential(t.Context(), testCredential), &agentvmv1.ListFilesRequest{Path: root, Recursive: recursive})
		require.NoError(t, err)
		var out []string
		for {
			fi, err := s.Recv()
			if errors.Is(err, io.EOF) {
				return out
			}
			require.NoError(t, err)
			out = append(out, strings.TrimPrefix(fi.GetPath(), root)+" "+fi.GetType()+" "+fi.GetLink())
		}
	}
	require.Equal(t, []string{"/b dir "}, list(false))
	require.Equal(t, []string{"/b dir ", "/b/blob.bin file ", "/b/link symlink blob.bin"}, list(true))
	st, err := a.session().StatFile(withCredential(t.Context(), testCredential), &agentvmv1.StatFileRequest{Path: filepath.Join(root, "b", "link")})
	require.NoError(t, err)
	require.Equal(t, "symlink", st.GetType())

	// A directory with something in it needs recursive.
	_, err = a.session().RemoveFile(withCredential(t.Context(), testCredential), &agentvmv1.RemoveFileRequest{Path: root})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	_, err = a.session().RemoveFile(withCredential(t.Context(), testCredential), &agentvmv1.RemoveFileRequest{Path: root, Recursive: true})
	require.NoError(t, err)
	_, err = os.Stat(root)
	require.True(t, os.IsNotExist(err))
}

// TestFileWriteFailureKeepsTheOldFile: a stream that ends short of its announced size, or
// carries more, changes nothing and leaves no temporary file.
func TestFileWriteFailureKeepsTheOldFile(t *testing.T) {
	a := startAgent(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "keep.txt")
	require.NoError(t, os.WriteFile(p, []byte("the old one"), 0o644))
	for name, size := range map[string]int64{"short": 100, "long": 3} {
		_, err := a.writeFile(t, p, []byte("new bytes"), size, 0)
		require.Equal(t, codes.InvalidArgument, status.Code(err), name)
		require.Contains(t, status.Convert(err).Message(), "size:", name)
		got, _ := os.ReadFile(p)
		require.Equal(t, "the old one", string(got), name)
	}
	entries, _ := os.ReadDir(dir)
	require.Len(t, entries, 1, "no temporary file is left")
}

// TestFileErrorsNameThePath: a missing path is NOT_FOUND naming it; a relative path, a
// directory read as a file, and the root's removal are refused naming the field.
func TestFileErrorsNameThePath(t *testing.T) {
	a := startAgent(t)
	_, _, err := a.readFile(t, "/no/such/file")
	require.Equal(t, codes.NotFound, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), `"/no/such/file": no such file or directory`)
	_, _, err = a.readFile(t, "relative/path")
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "path: must be an absolute path")
	_, _, err = a.readFile(t, t.TempDir())
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "is a directory")
	_, err = a.session().RemoveFile(withCredential(t.Context(), testCredential), &agentvmv1.RemoveFileRequest{Path: "/", Recursive: true})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = a.session().StatFile(withCredential(t.Context(), testCredential), &agentvmv1.StatFileRequest{Path: "/no/such"})
	require.Equal(t, codes.NotFound, status.Code(err))
}
