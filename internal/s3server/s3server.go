// Package s3server runs an embedded S3 server (versitygw with its posix
// backend) so `cocoonbox dev` and the integration tests get real S3 snapshot
// storage on a fresh machine without an external service.
//
// It lives apart from internal/objstore on purpose: versitygw is large, and
// the worker, which only needs an S3 client, must not link it.
//
// versitygw imposes two process-wide constraints: only one gateway may run per
// process, and its posix backend resolves bucket paths relative to the
// working directory, which it changes. So Start runs the gateway in a child
// process (this same executable, re-executed; see child.go) and the caller's
// process keeps its working directory and may run several servers.
package s3server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"
	"github.com/versity/versitygw/s3api"
)

// Region is the region the embedded server reports; S3 clients talking to it
// must sign requests for this region.
const Region = "us-east-1"

// DefaultAddr asks for a free loopback port.
const DefaultAddr = "127.0.0.1:0"

const (
	// Generous for a single developer's machine, far below versitygw's
	// production defaults (250000/100000), which size fasthttp's pools.
	maxConnections = 1024
	maxRequests    = 512
	maxParts       = 10000

	// A race with another process for an auto-picked port is retried;
	// an explicit port is the caller's to fix.
	autoPortAttempts = 3

	// Snapshot blobs hold users' home directories: keep them private.
	dirPerm  fs.FileMode = 0o700
	filePerm fs.FileMode = 0o600
)

// Options configures Start.
type Options struct {
	// Dir is the posix backend root; each bucket is a subdirectory.
	// It is created if missing.
	Dir string
	// Addr is the loopback host:port to listen on; DefaultAddr when empty.
	Addr string
	// AccessKey and SecretKey are the root credentials; both are required.
	AccessKey, SecretKey string
	// MetaDir holds sidecar metadata when Dir's filesystem has no user
	// xattrs; default is Dir with ".meta" appended. It must be outside Dir.
	MetaDir string
	// Logger receives the server's few lifecycle messages; nil discards them.
	Logger *slog.Logger `json:"-"`
}

// gateway is a versitygw running in this process; only the child process
// started by Start runs one.
type gateway struct {
	endpoint string
	dir      string
	metaMode string
	prevWD   string
	log      *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}
	runErr error // set before done is closed

	stopOnce sync.Once
	stopErr  error
}

// check validates opts and parses its address; both the parent and the child
// run it, so a bad option fails before anything is spawned or bound.
func (opts Options) check(ctx context.Context) (host, port string, auto bool, err error) {
	switch {
	case opts.AccessKey == "":
		return "", "", false, errors.New("s3: access key is required")
	case opts.SecretKey == "":
		return "", "", false, errors.New("s3: secret key is required")
	case opts.Dir == "":
		return "", "", false, errors.New("s3: dir is required")
	}
	if host, port, auto, err = parseAddr(opts.Addr); err != nil {
		return "", "", false, fmt.Errorf("s3: %w", err)
	}
	return host, port, auto, ctx.Err()
}

// running guards the one-gateway-per-process limit before posix.New changes
// the working directory out from under a server that is already running.
var running sync.Mutex

// startGateway starts versitygw in this process and returns once it accepts
// connections. ctx bounds the startup only; the gateway runs until stop.
func startGateway(ctx context.Context, opts Options) (*gateway, error) {
	host, port, auto, err := opts.check(ctx)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("s3: resolve dir: %w", err)
	}
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return nil, fmt.Errorf("s3: create dir: %w", err)
	}
	metaDir := opts.MetaDir
	if metaDir == "" {
		metaDir = dir + ".meta"
	}
	ms, metaMode, err := chooseMeta(dir, metaDir)
	if err != nil {
		return nil, fmt.Errorf("s3: %w", err)
	}
	if !running.TryLock() {
		return nil, errors.New("s3: an embedded S3 server is already running in this process (versitygw allows one)")
	}
	prevWD, err := os.Getwd()
	if err != nil {
		running.Unlock()
		return nil, fmt.Errorf("s3: get working directory: %w", err)
	}
	release := func() {
		restoreWD(prevWD, dir)
		running.Unlock()
	}

	for attempt := 1; ; attempt++ {
		addr, err := reservePort(host, port)
		if err != nil {
			release()
			return nil, err
		}
		s, err := launch(ctx, dir, addr, ms, opts)
		if err == nil {
			s.prevWD, s.log, s.metaMode = prevWD, log, metaMode
			return s, nil
		}
		inUse := errors.Is(err, syscall.EADDRINUSE)
		if auto && inUse && attempt < autoPortAttempts {
			log.Debug("s3 port taken before bind, retrying", "addr", addr)
			continue
		}
		release()
		if inUse {
			// Another process won the port between the check and the bind.
			return nil, listenError(addr, err)
		}
		return nil, fmt.Errorf("s3: %w", err)
	}
}

// launch runs one gateway on addr and waits until it listens or fails.
func launch(ctx context.Context, dir, addr string, ms metaStorer, opts Options) (*gateway, error) {
	// ETags from the checksum the server computes anyway, not MD5: an MD5 of every part was
	// a pass over each byte of a snapshot on the cores that compress it, and cocoonbox treats
	// ETags as opaque (integrity rests on the CRC32 it compares and the manifest's sha256).
	popts := posix.PosixOpts{DataIntegrityEtag: true}
	popts.SetNewDirPerm(dirPerm)
	popts.SetNewFilePerm(filePerm)
	be, err := posix.New(dir, ms, popts)
	if err != nil {
		return nil, fmt.Errorf("open posix backend: %w", err)
	}

	ready := make(chan struct{})
	var readyOnce sync.Once
	cfg := &embedgw.Config{
		RootUserAccess:    opts.AccessKey,
		RootUserSecret:    opts.SecretKey,
		Region:            Region,
		Ports:             []string{addr},
		MaxConnections:    maxConnections,
		MaxRequests:       maxRequests,
		MultipartMaxParts: maxParts,
		KeepAlive:         true,
		Quiet:             true,
		// Built here because auth.New prints to stdout when it picks
		// single-account mode.
		IAMService: auth.NewIAMServiceSingle(auth.Account{
			Access: opts.AccessKey,
			Secret: opts.SecretKey,
			Role:   auth.RoleAdmin,
		}),
		S3Options: []s3api.Option{
			s3api.WithOnListen(func() { readyOnce.Do(func() { close(ready) }) }),
		},
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &gateway{
		endpoint: "http://" + addr,
		dir:      dir,
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	go func() {
		s.runErr = embedgw.RunVersityGW(runCtx, be, cfg)
		// RunVersityGW skips the backend's shutdown when it rejects its
		// config; closing the root twice is harmless.
		be.Shutdown()
		close(s.done)
	}()

	select {
	case <-ready:
		if err := ctx.Err(); err != nil {
			// Both were ready and select chose at random: honour the cancel.
			cancel()
			<-s.done
			return nil, err
		}
		return s, nil
	case <-s.done:
		cancel()
		if s.runErr == nil {
			return nil, errors.New("run gateway: stopped before listening")
		}
		return nil, fmt.Errorf("run gateway: %w", s.runErr)
	case <-ctx.Done():
		cancel()
		<-s.done
		return nil, ctx.Err()
	}
}

// stop shuts the gateway down and waits for it; calling it again returns the
// first result.
func (s *gateway) stop() error {
	s.stopOnce.Do(func() {
		s.cancel()
		<-s.done
		restoreWD(s.prevWD, s.dir)
		running.Unlock()
		if s.runErr != nil {
			s.stopErr = fmt.Errorf("s3: stop: %w", s.runErr)
		}
		s.log.Debug("s3 server stopped", "endpoint", s.endpoint)
	})
	return s.stopErr
}

// restoreWD undoes posix.New's chdir, unless something else has moved the
// working directory since, in which case that choice wins. It compares files,
// not strings, because the kernel reports the working directory with
// symlinks resolved.
func restoreWD(prev, dir string) {
	wd, err1 := os.Stat(".")
	d, err2 := os.Stat(dir)
	if err1 == nil && err2 == nil && os.SameFile(wd, d) {
		_ = os.Chdir(prev)
	}
}
