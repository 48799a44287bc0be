package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// outputGrace is how long the init keeps forwarding output after the command exits. Output the
// command wrote before exiting is already in the pipe; the grace only bounds the wait for EOF
// when a background child still holds the pipe (`cmd &`), whose later output is discarded
// rather than making it die of SIGPIPE.
const outputGrace = 100 * time.Millisecond

// conn serializes frame writes to one engine connection and stops them once the exit is sent.
type conn struct {
	net.Conn
	mu       sync.Mutex
	detached bool
}

func (c *conn) frame(typ byte, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.detached {
		return
	}
	if err := boxproto.WriteFrame(c.Conn, typ, p); err != nil {
		c.detached = true
	}
}

// finish sends the last frame; output frames after it are dropped.
func (c *conn) finish(typ byte, v any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.detached {
		_ = boxproto.WriteJSON(c.Conn, typ, v)
	}
	c.detached = true
}

func fail(c *conn, kind, format string, args ...any) {
	c.finish(boxproto.TypeFailure, boxproto.Failure{Kind: kind, Message: fmt.Sprintf(format, args...)})
}

// runCredential runs `cocoonbox-init credential PATH` in the init itself: exit 0, or exit 1 with
// the reason on stderr, as the command run as a process answers.
func runCredential(c *conn, req boxproto.Request) {
	cred, err := credentialFrom(req.Env)
	if err == nil {
		err = writeCredential(req.Argv[2], cred)
	}
	if err != nil {
		c.frame(boxproto.TypeStderr, []byte("cocoonbox-init: "+err.Error()+"\n"))
		c.finish(boxproto.TypeExit, boxproto.Exit{Code: 1})
		return
	}
	c.finish(boxproto.TypeExit, boxproto.Exit{Code: 0})
}

// serveConn runs one command for one engine connection.
func serveConn(nc net.Conn, r *reaper) {
	defer func() { _ = nc.Close() }()
	c := &conn{Conn: nc}
	typ, payload, err := boxproto.ReadFrame(nc)
	if err != nil {
		return
	}
	var req boxproto.Request
	if typ != boxproto.TypeRequest || json.Unmarshal(payload, &req) != nil {
		fail(c, boxproto.FailBadRequest, "first frame must be a request")
		return
	}
	if req.Version != boxproto.Version {
		fail(c, boxproto.FailBadRequest, "protocol version %d, this init speaks %d", req.Version, boxproto.Version)
		return
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		fail(c, boxproto.FailBadRequest, "empty argv")
		return
	}
	if isCredential(req.Argv) {
		runCredential(c, req)
		return
	}
	if h, ok := reseedHostname(req.Argv); ok {
		// Only the init may set the hostname; the rest of the reseed runs as a command. An
		// init started without the capability (a box booted before it was given) lets the
		// command say the hostname stays.
		err := checkHostname(h)
		if err == nil {
			if err = setHostname(h); errors.Is(err, syscall.EPERM) {
				err = nil
			}
		}
		if err != nil {
			c.frame(boxproto.TypeStderr, []byte("cocoonbox-init: reseed: "+err.Error()+"\n"))
			c.finish(boxproto.TypeExit, boxproto.Exit{Code: 1})
			return
		}
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/"
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		fail(c, boxproto.FailBadCwd, "cwd %s is not a directory", cwd)
		return
	}
	env := mergeEnv(os.Environ(), req.Env)
	path, err := lookPath(req.Argv[0], cwd, env)
	if err != nil {
		fail(c, boxproto.FailBadCommand, "%s: %v", req.Argv[0], err)
		return
	}

	var pipes [6]*os.File // stdin r/w, stdout r/w, stderr r/w
	for i := 0; i < 6; i += 2 {
		if pipes[i], pipes[i+1], err = os.Pipe(); err != nil {
			fail(c, boxproto.FailInternal, "pipe: %v", err)
			return
		}
	}
	pid, exited, err := r.spawn(path, req.Argv, env, cwd, []uintptr{pipes[0].Fd(), pipes[3].Fd(), pipes[5].Fd()})
	_ = pipes[0].Close()
	_ = pipes[3].Close()
	_ = pipes[5].Close()
	if err != nil {
		_ = pipes[1].Close()
		_ = pipes[2].Close()
		_ = pipes[4].Close()
		kind := boxproto.FailInternal
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOEXEC) || errors.Is(err, syscall.ENOTDIR) {
			kind = boxproto.FailBadCommand
		}
		fail(c, kind, "start %s: %v", req.Argv[0], err)
		return
	}

	var finished atomic.Bool
	stdin := newQueue(pipes[1])
	go func() { // engine → command: stdin and kill; a vanished engine kills the command
		for {
			typ, p, err := boxproto.ReadFrame(nc)
			if err != nil {
				if !finished.Load() {
					_ = syscall.Kill(-pid, syscall.SIGKILL)
				}
				stdin.close()
				return
			}
			switch typ {
			case boxproto.TypeStdin:
				stdin.push(p)
			case boxproto.TypeStdinEOF:
				stdin.close()
			case boxproto.TypeKill:
				if !finished.Load() {
					_ = syscall.Kill(-pid, syscall.SIGKILL)
				}
			}
		}
	}()
	outDone, errDone := make(chan struct{}), make(chan struct{})
	go pump(c, pipes[2], boxproto.TypeStdout, outDone)
	go pump(c, pipes[4], boxproto.TypeStderr, errDone)

	ws := <-exited
	grace := time.NewTimer(outputGrace)
	for pending := 2; pending > 0; {
		select {
		case <-outDone:
			outDone, pending = nil, pending-1
		case <-errDone:
			errDone, pending = nil, pending-1
		case <-grace.C:
			pending = 0
		}
	}
	grace.Stop()
	finished.Store(true)
	stdin.close()
	ex := boxproto.Exit{Code: ws.ExitStatus()}
	if ws.Signaled() {
		ex = boxproto.Exit{Code: 128 + int(ws.Signal()), Signal: int(ws.Signal())}
	}
	c.finish(boxproto.TypeExit, ex)
	if uc, ok := nc.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
}

// pump forwards one output pipe as frames until EOF; after the exit frame it keeps draining so
// background writers never block or die on a full or closed pipe.
func pump(c *conn, f *os.File, typ byte, done chan struct{}) {
	defer close(done)
	defer func() { _ = f.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			c.frame(typ, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// queue feeds stdin to the command without ever blocking the frame reader, so a kill frame is
// seen even while the command is not reading its stdin.
type queue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	chunks [][]byte
	closed bool
}

func newQueue(w io.WriteCloser) *queue {
	q := &queue{}
	q.cond = sync.NewCond(&q.mu)
	go func() {
		defer func() { _ = w.Close() }()
		for {
			q.mu.Lock()
			for len(q.chunks) == 0 && !q.closed {
				q.cond.Wait()
			}
			if len(q.chunks) == 0 {
				q.mu.Unlock()
				return
			}
			p := q.chunks[0]
			q.chunks = q.chunks[1:]
			q.mu.Unlock()
			if _, err := w.Write(p); err != nil {
				q.close()
				return
			}
		}
	}()
	return q
}

func (q *queue) push(p []byte) {
	q.mu.Lock()
	if !q.closed {
		q.chunks = append(q.chunks, p)
	}
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Signal()
}

// mergeEnv overrides base with extra by key, keeping base's order.
func mergeEnv(base, extra []string) []string {
	out := make([]string, 0, len(base)+len(extra))
	idx := map[string]int{}
	for _, kv := range append(append([]string{}, base...), extra...) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// lookPath resolves argv[0] the way a shell would, with the command's own PATH, so that a
// missing binary is reported as such instead of as a failed fork.
func lookPath(name, cwd string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(cwd, name)
		}
		return name, executable(name)
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		p := filepath.Join(dir, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", errors.New("command not found")
}

func executable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return errors.New("no such file")
	case fi.IsDir():
		return errors.New("is a directory")
	case fi.Mode()&0o111 == 0:
		return errors.New("not executable")
	}
	return nil
}
