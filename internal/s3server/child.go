package s3server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/loomhand/cocoonbox/internal/subproc"
)

// childArg, as the first argument, turns any executable that links this
// package into the S3 server child (see init). Re-executing ourselves keeps
// one binary and needs no separate versitygw install.
const childArg = "__cocoonbox-s3server-child"

// stopTimeout bounds a graceful child shutdown before it is killed. Stop returns as soon as the
// child exits (well under a second when idle); on a loaded 2-core machine, with the server just
// having taken a 40 MiB multipart upload, its exit was seen to take over 10 s.
const stopTimeout = 30 * time.Second

func init() { subproc.Main(childArg, runChild) }

// childReply is the child's one line on stdout once it listens or has failed.
type childReply struct {
	Endpoint string `json:"endpoint,omitempty"`
	Metadata string `json:"metadata,omitempty"`
	Error    string `json:"error,omitempty"`
	Errno    int    `json:"errno,omitempty"` // set for listen failures, so errors.Is works in the parent
	Addr     string `json:"addr,omitempty"`
}

// Server is a running embedded S3 server (a child process of this one).
type Server struct {
	endpoint string
	opts     Options // what the child runs with; Addr is the address it got, for Restart
	log      *slog.Logger
	child    atomic.Pointer[child] // the process started last
	stopMu   sync.Mutex            // serializes Stop
}

// child is one run of the server process.
type child struct {
	*subproc.Process
	stopped bool // Stop has run on it (under Server.stopMu), with stopErr
	stopErr error
}

// Start starts the server in a child process and returns once it accepts
// connections. ctx bounds the startup only; the server runs until Stop, and
// it also ends when this process dies, however it dies (its stdin closes).
func Start(ctx context.Context, opts Options) (*Server, error) {
	host, port, auto, err := opts.check(ctx)
	if err != nil {
		return nil, err
	}
	if !auto { // a busy explicit port is the caller's to fix: say so before spawning anything
		if _, err := reservePort(host, port); err != nil {
			return nil, err
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("s3: resolve dir: %w", err)
	}
	opts.Dir = dir
	if opts.MetaDir != "" {
		if opts.MetaDir, err = filepath.Abs(opts.MetaDir); err != nil {
			return nil, fmt.Errorf("s3: resolve meta dir: %w", err)
		}
	}
	s := &Server{opts: opts, log: log}
	if err := s.spawn(ctx); err != nil {
		return nil, err
	}
	// A restart listens where the clients already point.
	s.opts.Addr = strings.TrimPrefix(s.endpoint, "http://")
	return s, nil
}

// Restart starts the server process again after it exited on its own (a crash, the OOM killer),
// on the same address and directory, so clients holding the endpoint carry on.
func (s *Server) Restart(ctx context.Context) error {
	select {
	case <-s.Done():
	default:
		return errors.New("s3: restart: the server is still running")
	}
	return s.spawn(ctx)
}

// spawn starts a child with s.opts and waits until it listens.
func (s *Server) spawn(ctx context.Context) error {
	var r childReply
	p, err := subproc.Start(ctx, subproc.Spec{Name: "s3", Arg: childArg, Config: s.opts,
		Log: s.log.With("child", "s3 server"), Grace: stopTimeout}, &r)
	if err != nil {
		return err
	}
	if r.Error != "" {
		p.Kill()
		if r.Errno != 0 {
			return listenError(r.Addr, syscall.Errno(r.Errno))
		}
		return fmt.Errorf("s3: %s", r.Error)
	}
	s.endpoint = r.Endpoint
	s.child.Store(&child{Process: p})
	s.log.Info("s3 server ready", "endpoint", r.Endpoint, "dir", s.opts.Dir, "metadata", r.Metadata, "pid", p.Pid())
	return nil
}

// Endpoint returns the server's base URL, "http://127.0.0.1:port".
func (s *Server) Endpoint() string { return s.endpoint }

// Done is closed when the server process started last has exited, after Stop
// or on its own; a supervisor selects on it to notice a server that died.
func (s *Server) Done() <-chan struct{} { return s.child.Load().Done() }

// ExitError says how the server process started last ended, once Done is closed.
func (s *Server) ExitError() error { return s.child.Load().ExitError() }

// Pid is the server process's pid, for a test that kills it.
func (s *Server) Pid() int { return s.child.Load().Pid() }

// Stop shuts the server down gracefully and waits for it; calling it again returns the first
// result, until a Restart starts a new process for the next Stop to stop.
func (s *Server) Stop() error {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	c := s.child.Load()
	if !c.stopped {
		c.stopped, c.stopErr = true, c.Stop()
		s.log.Debug("s3 server stopped", "endpoint", s.endpoint)
	}
	return c.stopErr
}

// runChild is the child process: read the options, run the gateway, report
// readiness on stdout, and stop when stdin closes (the parent stopped us or
// died) or on SIGTERM.
func runChild(in io.Reader, out, errOut io.Writer, _ []*os.File) int {
	signal.Ignore(os.Interrupt) // the parent owns Ctrl-C and stops us in order
	var opts Options
	br := bufio.NewReader(in)
	if err := json.NewDecoder(br).Decode(&opts); err != nil {
		fmt.Fprintln(errOut, "s3 child: read options:", err)
		return 2
	}
	opts.Logger = subproc.Logger(errOut, slog.LevelWarn)
	enc := json.NewEncoder(out)
	g, err := startGateway(context.Background(), opts)
	if err != nil {
		r := childReply{Error: strings.TrimPrefix(err.Error(), "s3: ")}
		var errno syscall.Errno
		if errors.As(err, &errno) && errno == syscall.EADDRINUSE {
			r.Errno, r.Addr = int(errno), listenAddr(err)
		}
		_ = enc.Encode(r)
		return 1
	}
	_ = enc.Encode(childReply{Endpoint: g.endpoint, Metadata: g.metaMode})

	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	eof := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, br); close(eof) }()
	select {
	case <-eof:
	case <-term:
	case <-g.done:
	}
	if err := g.stop(); err != nil {
		fmt.Fprintln(errOut, err)
		return 1
	}
	return 0
}

// listenAddr recovers the address from listenError's "s3: listen ADDR: …".
func listenAddr(err error) string {
	msg := strings.TrimPrefix(err.Error(), "s3: listen ")
	if i := strings.Index(msg, ": "); i > 0 {
		return msg[:i]
	}
	return ""
}
