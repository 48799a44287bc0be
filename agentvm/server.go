package agentvm

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/loomhand/cocoonbox/agentvm/tools"
	"github.com/loomhand/cocoonbox/agentvm/tools/desktop"
	"github.com/loomhand/cocoonbox/agentvm/wire"
	agentvmv1 "github.com/loomhand/cocoonbox/proto/agentvm/v1"
)

// DefaultStepTimeout bounds one step when Config.StepTimeout is zero.
const DefaultStepTimeout = 30 * time.Minute

// LoadCredential reads the per-box credential from path, or from wire.CredentialEnv when path is
// empty. An empty credential is an error: the agent never serves unauthenticated.
func LoadCredential(path string) (string, error) {
	var cred string
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("read credential: %w", err)
		}
		cred = strings.TrimSpace(string(data))
	} else {
		cred = strings.TrimSpace(os.Getenv(wire.CredentialEnv))
	}
	if cred == "" {
		return "", errors.New("read credential: empty; give a credential file or set " + wire.CredentialEnv)
	}
	return cred, nil
}

// Config is what a Server needs.
type Config struct {
	// Credential is the per-box credential every call must carry as "authorization: Bearer ...".
	// Exactly one of Credential and CredentialFile is required.
	Credential string
	// CredentialFile holds the credential instead, read when calls arrive rather than at start:
	// the agent starts at boot, before the control plane has written the file, and until it
	// exists (non-empty) every call is UNAUTHENTICATED "no credential yet". It is read again
	// when its modification time or size changes, so the control plane can rotate it.
	CredentialFile string
	// Loop runs the steps. Required.
	Loop *Loop
	// Journal records completed steps. Required.
	Journal *Journal
	// StepTimeout bounds one step; zero means DefaultStepTimeout.
	StepTimeout time.Duration
	// Desktop is the box's display the Desktop service drives; nil leaves the service
	// unregistered (UNIMPLEMENTED), for a box without a desktop.
	Desktop *desktop.Desktop
	// MCP says the agent also serves the in-box MCP endpoint (MCPHandler); Info reports it.
	MCP bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Server is the agent's gRPC server: Agents, Session, Desktop, State and Info behind the
// credential check.
type Server struct {
	agentvmv1.UnimplementedAgentsServer
	agentvmv1.UnimplementedSessionServer
	agentvmv1.UnimplementedInfoServer

	cfg  Config
	cred *credential
	grpc *grpc.Server

	mu            sync.Mutex
	running       map[string]map[int32]context.CancelFunc // run ID → step → cancel of the step in progress
	linkListeners []net.Listener
}

// NewServer returns a server for cfg.
func NewServer(cfg Config) (*Server, error) {
	if (cfg.Credential == "") == (cfg.CredentialFile == "") {
		return nil, errors.New("new server: exactly one of credential and credential file is required")
	}
	if cfg.Loop == nil || cfg.Journal == nil {
		return nil, errors.New("new server: loop and journal are required")
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cred := &credential{path: cfg.CredentialFile}
	if cfg.Credential != "" {
		cred.sum, cred.ok = sha256.Sum256([]byte(cfg.Credential)), true
	}
	s := &Server{cfg: cfg, cred: cred, running: map[string]map[int32]context.CancelFunc{}}
	s.grpc = grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.authUnary),
		grpc.ChainStreamInterceptor(s.authStream),
		grpc.InitialWindowSize(wire.StreamWindow), grpc.InitialConnWindowSize(wire.ConnWindow),
		grpc.ReadBufferSize(wire.SocketBuffer), grpc.WriteBufferSize(wire.SocketBuffer),
	)
	agentvmv1.RegisterAgentsServer(s.grpc, s)
	agentvmv1.RegisterSessionServer(s.grpc, s)
	agentvmv1.RegisterInfoServer(s.grpc, s)
	agentvmv1.RegisterStateServer(s.grpc, &stateService{log: cfg.Logger})
	if cfg.Desktop != nil {
		agentvmv1.RegisterDesktopServer(s.grpc, &desktopService{d: cfg.Desktop})
	}
	return s, nil
}

// Serve serves on lis until Stop.
func (s *Server) Serve(lis net.Listener) error { return s.grpc.Serve(lis) }

// Stop cancels the steps in progress and stops the server, letting calls in flight end.
func (s *Server) Stop() {
	s.mu.Lock()
	for _, steps := range s.running {
		for _, cancel := range steps {
			cancel()
		}
	}
	for _, lis := range s.linkListeners {
		_ = lis.Close()
	}
	s.mu.Unlock()
	if s.cfg.Loop.Links != nil {
		s.cfg.Loop.Links.closeAll()
	}
	s.grpc.GracefulStop()
}

// credential is the per-box credential's hash: fixed, or read lazily from a file and read again
// when the file changes.
type credential struct {
	path string // empty: fixed

	mu    sync.Mutex
	mtime time.Time
	size  int64
	sum   [sha256.Size]byte
	ok    bool
}

// current returns the credential's hash, or false while there is none (no file yet, or an
// empty one).
func (c *credential) current(log *slog.Logger) ([sha256.Size]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.path == "" {
		return c.sum, c.ok
	}
	fi, err := os.Stat(c.path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.Warn("stat credential", "err", err)
		}
		c.ok, c.mtime, c.size = false, time.Time{}, 0
		return c.sum, false
	}
	if fi.ModTime().Equal(c.mtime) && fi.Size() == c.size {
		return c.sum, c.ok
	}
	data, err := os.ReadFile(c.path)
	if err != nil {
		log.Warn("read credential", "err", err)
		return c.sum, false
	}
	cred := strings.TrimSpace(string(data))
	c.sum, c.ok, c.mtime, c.size = sha256.Sum256([]byte(cred)), cred != "", fi.ModTime(), fi.Size()
	return c.sum, c.ok
}

// check compares a presented credential with the box's in constant time. Its errors name the
// reason, never the credential. The gRPC calls and the model links both go through it.
func (s *Server) check(token string) error {
	want, ok := s.cred.current(s.cfg.Logger)
	if !ok {
		return errors.New("no credential yet")
	}
	sum := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
		return errors.New("invalid credential")
	}
	return nil
}

// authorize checks the call's bearer credential. A missing or malformed header checks as the
// empty token, which never matches: the credential is never empty.
func (s *Server) authorize(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	var token string
	if len(vals) == 1 {
		if t, ok := strings.CutPrefix(vals[0], "Bearer "); ok {
			token = t
		}
	}
	if err := s.check(token); err != nil {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	return nil
}

func (s *Server) authUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.authorize(ss.Context()); err != nil {
		return err
	}
	return handler(srv, ss)
}

// Step runs a step once: a step already completed is answered from the journal. The step runs
// detached from the call, so a caller that gives up (its activity timed out) does not interrupt
// it half-way; its retry waits for the step and gets the recorded response. Cancel stops it.
func (s *Server) Step(ctx context.Context, req *agentvmv1.StepRequest) (*agentvmv1.StepResponse, error) {
	if err := checkKey(req.GetRunId(), req.GetStep()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	log := s.cfg.Logger.With("run_id", req.GetRunId(), "step", req.GetStep())
	type result struct {
		resp *agentvmv1.StepResponse
		err  error
	}
	done := make(chan result, 1)
	stepCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StepTimeout)
	go func() {
		defer cancel()
		resp, err := s.cfg.Journal.Do(stepCtx, req.GetRunId(), req.GetStep(), func(ctx context.Context) (*agentvmv1.StepResponse, error) {
			defer s.track(req.GetRunId(), req.GetStep(), cancel)()
			start := time.Now()
			resp, err := s.cfg.Loop.Step(ctx, req)
			if err != nil {
				log.Warn("step failed", "err", err, "took", time.Since(start))
				return nil, err
			}
			log.Info("step done", "tool_calls", len(resp.GetToolCalls()), "done", resp.GetDone(), "took", time.Since(start))
			return resp, nil
		})
		if err != nil {
			if errors.Is(err, ErrInterrupted) {
				log.Warn("step interrupted by the agent's restart; not run again")
				err = status.Error(codes.FailedPrecondition, err.Error())
			}
			if _, ok := status.FromError(err); !ok {
				err = status.Error(codes.Internal, err.Error())
			}
			if stepCtx.Err() != nil {
				err = status.FromContextError(stepCtx.Err()).Err()
			}
		}
		done <- result{resp, err}
	}()
	select {
	case r := <-done:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// track registers a step in progress for Cancel; the returned func unregisters it.
func (s *Server) track(runID string, step int32, cancel context.CancelFunc) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[runID] == nil {
		s.running[runID] = map[int32]context.CancelFunc{}
	}
	s.running[runID][step] = cancel
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.running[runID], step)
		if len(s.running[runID]) == 0 {
			delete(s.running, runID)
		}
	}
}

// Cancel stops the run's steps in progress.
func (s *Server) Cancel(ctx context.Context, req *agentvmv1.CancelRequest) (*agentvmv1.CancelResponse, error) {
	if req.GetRunId() == "" {
		return nil, status.Error(codes.InvalidArgument, "run_id is required")
	}
	s.mu.Lock()
	steps := s.running[req.GetRunId()]
	for _, cancel := range steps {
		cancel()
	}
	s.mu.Unlock()
	return &agentvmv1.CancelResponse{Cancelled: len(steps) > 0}, nil
}

// SetDesktopLease tells the loop whether a person holds the desktop's control lease now.
func (s *Server) SetDesktopLease(_ context.Context, req *agentvmv1.SetDesktopLeaseRequest) (*agentvmv1.SetDesktopLeaseResponse, error) {
	s.cfg.Loop.SetDesktopHeld(req.GetHeld(), req.GetLeaseSeq())
	return &agentvmv1.SetDesktopLeaseResponse{}, nil
}

// Get returns the agent's version, capabilities and, with a desktop, its window manager.
func (s *Server) Get(ctx context.Context, _ *agentvmv1.GetInfoRequest) (*agentvmv1.InfoResponse, error) {
	caps := []string{"step", "exec", "process", "files", "state"}
	var wm string
	if s.cfg.Desktop != nil {
		caps = append(caps, "desktop")
		// A display not up yet has no manager either: Info still answers.
		wm, _ = s.cfg.Desktop.WindowManager(ctx)
	}
	if s.cfg.MCP {
		caps = append(caps, "mcp")
	}
	for _, t := range s.cfg.Loop.Tools {
		caps = append(caps, "tool:"+t.Name())
	}
	return &agentvmv1.InfoResponse{Version: Version, Capabilities: caps, WindowManager: wm}, nil
}

// execChunk is the most output one ExecOutput carries.
const execChunk = 32 << 10

// chanWriter hands each write, in chunks of at most execChunk, to send; the bytes are copied.
type chanWriter func([]byte)

func (w chanWriter) Write(p []byte) (int, error) {
	for i := 0; i < len(p); i += execChunk {
		w(append([]byte(nil), p[i:min(i+execChunk, len(p))]...))
	}
	return len(p), nil
}

// Exec runs a command with sh -c and streams its output, then its exit code.
func (s *Server) Exec(req *agentvmv1.ExecRequest, stream grpc.ServerStreamingServer[agentvmv1.ExecOutput]) error {
	if strings.TrimSpace(req.GetCommand()) == "" {
		return status.Error(codes.InvalidArgument, "command is required")
	}
	if req.GetTimeoutSeconds() < 0 {
		return status.Error(codes.InvalidArgument, "timeout_seconds must not be negative")
	}
	ctx := stream.Context()
	if t := req.GetTimeoutSeconds(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		defer cancel()
	}
	var env []string
	for k, v := range req.GetEnv() {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return status.Errorf(codes.InvalidArgument, "env: invalid name %q", k)
		}
		env = append(env, k+"="+v)
	}
	cmd := tools.ShellCommand(ctx, req.GetCommand(), req.GetCwd(), env)
	out := make(chan *agentvmv1.ExecOutput)
	cmd.Stdout = chanWriter(func(b []byte) { out <- &agentvmv1.ExecOutput{Stdout: b} })
	cmd.Stderr = chanWriter(func(b []byte) { out <- &agentvmv1.ExecOutput{Stderr: b} })
	if err := cmd.Start(); err != nil {
		return status.Errorf(codes.FailedPrecondition, "start command: %v", err)
	}
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(out) }()

	var sendErr error
	for msg := range out { // drained to the end so the command's writers never block
		if sendErr == nil {
			sendErr = stream.Send(msg)
		}
	}
	if sendErr != nil {
		return sendErr
	}
	if stream.Context().Err() != nil {
		return status.FromContextError(stream.Context().Err()).Err()
	}
	code := 0
	var exitErr *exec.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exitErr):
		code = exitErr.ExitCode() // -1 when killed by a signal, e.g. on timeout
	default:
		return status.Errorf(codes.Internal, "wait command: %v", waitErr)
	}
	return stream.Send(&agentvmv1.ExecOutput{Exited: true, ExitCode: int32(code)})
}
