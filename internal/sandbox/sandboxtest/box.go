package sandboxtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/loomhand/cocoonbox/internal/sandbox"
)

// A box is a sandbox's stand-in: a directory holding its disk (root/ seen as /root, tmp/ as /tmp)
// and, while awake, an init process that owns a private mount namespace (where those binds live)
// and a PID namespace (so killing init stops every process of the box, as hibernate must).
// Commands enter both namespaces with nsenter and otherwise see the host's files and network:
// the fake isolates what the conformance suite looks at, not everything.
//
// Where namespaces cannot be made (no root and no unprivileged user namespaces), boxes run in
// host mode: commands run on the host with the box's directories as cwd, HOME and TMPDIR, and
// hibernate stops nothing. Fake.Isolated reports which.
type box struct {
	dir      string
	isolated bool

	mu   sync.Mutex
	init *exec.Cmd     // nil while hibernated (isolated mode)
	done chan struct{} // closed when init has exited
}

// initScript runs as the box's PID 1 in its new namespaces: make mounts private so the binds do
// not leak to the host, bind the box's disk, say ready, and sleep until killed.
const initScript = `mount --make-rprivate / && mount --bind "$1" /root && mount --bind "$2" /tmp && echo ready && exec sleep infinity`

// execScript runs a command inside the box, reporting on fd 3 why it could not (bad cwd, missing
// binary) so the fake can answer 400 like the engine, not a 127 exit.
const execScript = `cd -- "$1" 2>/dev/null || { echo cwd >&3; exit 1; }
shift
command -v -- "$1" >/dev/null 2>&1 || { echo argv0 >&3; exit 1; }
exec 3>&-
exec "$@"`

func newBox(dir string, isolated bool) (*box, error) {
	for _, d := range []string{"root", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("create box dir: %w", err)
		}
	}
	// tmp is world-writable like /tmp.
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		return nil, fmt.Errorf("create box dir: %w", err)
	}
	return &box{dir: dir, isolated: isolated}, nil
}

// start brings the box up; a running box is left alone.
func (b *box) start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.isolated || b.init != nil {
		return nil
	}
	cmd := exec.Command("/bin/sh", "-c", initScript, "sandboxtest-init",
		filepath.Join(b.dir, "root"), filepath.Join(b.dir, "tmp"))
	cmd.SysProcAttr = nsAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("start box: %w", err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start box: %w", err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("start box: init failed: %s", strings.TrimSpace(stderr.String()))
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.init, b.done = cmd, done
	return nil
}

// stop kills every process of the box and keeps its disk.
func (b *box) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.init == nil {
		return
	}
	// SIGKILL: a PID namespace's init ignores other signals from outside, and its death takes
	// every process of the namespace with it.
	_ = b.init.Process.Signal(syscall.SIGKILL)
	<-b.done
	b.init, b.done = nil, nil
}

func (b *box) initPID() (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.init == nil {
		return 0, false
	}
	return b.init.Process.Pid, true
}

// execResult is what one command did.
type execResult struct {
	res      sandbox.ExecResult
	badInput string // non-empty: the command could not start (answer 400)
	timedOut bool   // killed at its timeout (answer 504)
	tooLarge bool   // killed for output over the cap (answer 413)
}

// run executes req in the box. ctx is the request's: its end (client gone) kills the child.
func (b *box) run(ctx context.Context, req sandbox.ExecRequest) (execResult, error) {
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/root"
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
	var argv []string
	if b.isolated {
		pid, ok := b.initPID()
		if !ok {
			return execResult{}, errors.New("run command: box is not running")
		}
		argv = []string{"nsenter", "-t", fmt.Sprint(pid), "-m", "-p"}
		if os.Geteuid() != 0 {
			argv = append(argv, "-U", "--preserve-credentials")
		}
		argv = append(argv, "--", "/bin/sh", "-c", execScript, "sandboxtest-exec", cwd)
	} else {
		cwd = b.hostPath(cwd)
		env = []string{env[0], "HOME=" + b.hostPath("/root"), "TMPDIR=" + b.hostPath("/tmp"), env[2]}
		argv = []string{"/bin/sh", "-c", execScript, "sandboxtest-exec", cwd}
	}
	argv = append(argv, req.Argv...)
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var timedOut <-chan struct{}
	if req.TimeoutSeconds > 0 {
		tctx, tcancel := context.WithTimeout(runCtx, time.Duration(req.TimeoutSeconds)*time.Second)
		defer tcancel()
		runCtx, timedOut = tctx, tctx.Done()
	}
	report, reportW, err := os.Pipe()
	if err != nil {
		return execResult{}, fmt.Errorf("run command: %w", err)
	}
	defer report.Close()
	out := &capped{limit: sandbox.MaxExecOutput, over: cancel}
	cmd := exec.CommandContext(runCtx, argv[0], argv[1:]...)
	cmd.Env = env
	if len(req.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	}
	cmd.Stdout, cmd.Stderr = out.stream(0), out.stream(1)
	cmd.ExtraFiles = []*os.File{reportW}
	// Its own process group, so a timeout kills nsenter, the command and whatever the command
	// started without detaching (setsid'd daemons are meant to outlive the exec).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second // a background child holding stdout must not hang the exec
	err = cmd.Start()
	_ = reportW.Close()
	if err != nil {
		return execResult{}, fmt.Errorf("run command: %w", err)
	}
	waitErr := cmd.Wait()
	why, _ := io.ReadAll(io.LimitReader(report, 64))

	r := execResult{res: sandbox.ExecResult{
		ExitCode: exitCode(cmd.ProcessState),
		Stdout:   strings.ToValidUTF8(out.buf[0].String(), "\uFFFD"),
		Stderr:   strings.ToValidUTF8(out.buf[1].String(), "\uFFFD"),
	}}
	switch {
	case out.exceeded():
		r.tooLarge = true
	case timedOut != nil && isClosed(timedOut) && ctx.Err() == nil:
		r.timedOut = true
	case ctx.Err() != nil:
		return r, ctx.Err()
	case strings.TrimSpace(string(why)) == "cwd":
		r.badInput = fmt.Sprintf("cwd %q does not exist", req.Cwd)
	case strings.TrimSpace(string(why)) == "argv0":
		r.badInput = fmt.Sprintf("executable %q not found", req.Argv[0])
	case waitErr != nil && cmd.ProcessState == nil:
		return r, fmt.Errorf("run command: %w", waitErr)
	}
	return r, nil
}

// hostPath maps a box path under /root or /tmp to the box's directory (host mode).
func (b *box) hostPath(p string) string {
	for _, d := range []string{"/root", "/tmp"} {
		if p == d || strings.HasPrefix(p, d+"/") {
			return filepath.Join(b.dir, d[1:], strings.TrimPrefix(p, d))
		}
	}
	return p
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// capped collects stdout and stderr up to a shared limit and calls over once when it is passed.
type capped struct {
	mu    sync.Mutex
	limit int
	n     int
	buf   [2]bytes.Buffer
	over  func()
	hit   bool
}

type cappedStream struct {
	c *capped
	i int
}

func (c *capped) stream(i int) io.Writer { return cappedStream{c, i} }

func (s cappedStream) Write(p []byte) (int, error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hit {
		return len(p), nil // keep draining; the child is being killed
	}
	c.n += len(p)
	if c.n > c.limit {
		c.hit = true
		c.over()
		return len(p), nil
	}
	return c.buf[s.i].Write(p)
}

func (c *capped) exceeded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hit
}

// copyDisk copies one box's disk into another directory (checkpoint and claim from it).
func copyDisk(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("copy disk: %w", err)
	}
	if out, err := exec.Command("cp", "-a", src+"/.", dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copy disk: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}
