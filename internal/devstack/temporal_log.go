package devstack

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
)

var _ log.Logger = (*serverLogger)(nil)
var _ log.WithLogger = (*serverLogger)(nil)

// serverLogger adapts Temporal's logger interface to slog. Only warnings and errors pass:
// the server logs every shard acquisition and membership change at info, which would drown
// whatever `cocoonbox dev` prints.
type serverLogger struct {
	l *slog.Logger
	// with holds the tags of With calls, converted only when a record passes the level
	// check: the server calls With on hot paths (per task, per request) and logs rarely.
	with  []tag.Tag
	fatal *fatalHandler
	// stopping is set by Stop: while the services shut down one by one, the survivors warn
	// about the ones already gone (failed polls, refused dials). That is expected, so it is
	// demoted to debug rather than shown on every Ctrl-C.
	stopping *atomic.Bool
}

func newServerLogger(l *slog.Logger) *serverLogger {
	return &serverLogger{l: l, fatal: &fatalHandler{}, stopping: &atomic.Bool{}}
}

// knownNoise are warnings every start of this configuration logs and nobody can act on.
var knownNoise = []string{
	// The HTTP API is off on purpose: the SDK and the UI use gRPC, and cocoonbox has no
	// Nexus endpoints.
	"HTTP API port has not been set.",
}

// Debug is dropped; see serverLogger.
func (s *serverLogger) Debug(string, ...tag.Tag) {}

// Info is dropped; see serverLogger.
func (s *serverLogger) Info(string, ...tag.Tag) {}

func (s *serverLogger) Warn(msg string, tags ...tag.Tag) { s.log(slog.LevelWarn, msg, tags) }

func (s *serverLogger) Error(msg string, tags ...tag.Tag) { s.log(slog.LevelError, msg, tags) }

// DPanic logs only, as the server does in production mode.
func (s *serverLogger) DPanic(msg string, tags ...tag.Tag) { s.log(slog.LevelError, msg, tags) }

func (s *serverLogger) Panic(msg string, tags ...tag.Tag) {
	s.log(slog.LevelError, msg, tags)
	panic(msg)
}

// Fatal must not return: the server's callers do not expect to continue. See fatalHandler.
func (s *serverLogger) Fatal(msg string, tags ...tag.Tag) {
	s.log(slog.LevelError, msg, tags)
	s.fatal.fatal(msg, slices.Concat(s.with, tags))
}

func (s *serverLogger) With(tags ...tag.Tag) log.Logger {
	c := *s
	c.with = append(slices.Clip(s.with), tags...)
	return &c
}

func (s *serverLogger) log(level slog.Level, msg string, tags []tag.Tag) {
	if s.stopping.Load() {
		level = slog.LevelDebug
	}
	for _, n := range knownNoise {
		if strings.HasPrefix(msg, n) {
			level = slog.LevelDebug
		}
	}
	if !s.l.Enabled(context.Background(), level) {
		return
	}
	out := make([]any, 0, len(s.with)+len(tags))
	for _, t := range slices.Concat(s.with, tags) {
		out = append(out, slog.Any(t.Key(), t.Value()))
	}
	s.l.Log(context.Background(), level, msg, out...)
}

// fatalHandler decides what a Fatal log does. While StartTemporal is building and starting
// the server, Fatal (a port taken between our check and the server's bind, say) panics with a
// startupFatal that StartTemporal recovers into an ordinary error. Once the server runs, Fatal
// keeps the server's meaning, exiting the process, but first prints one line to stderr so the
// reason is not hidden in temporal.log.
type fatalHandler struct {
	running atomic.Bool
}

// startupFatal carries a Fatal log raised during startup to StartTemporal's recover.
type startupFatal struct {
	msg string
}

func (f *fatalHandler) fatal(msg string, tags []tag.Tag) {
	line := msg + tagText(tags)
	if !f.running.Load() {
		panic(startupFatal{msg: line})
	}
	fmt.Fprintf(os.Stderr, "temporal: fatal: %s\n", line)
	os.Exit(1)
}

func tagText(tags []tag.Tag) string {
	var b strings.Builder
	for _, t := range tags {
		if t.Key() == tag.LoggingCallAtKey {
			continue
		}
		fmt.Fprintf(&b, " %s=%v", t.Key(), t.Value())
	}
	return b.String()
}

// newLogger picks where the server's logs go: the caller's logger, or a JSON file in the data
// dir when there is none, so that a bare `cocoonbox dev` keeps its terminal clean.
func newLogger(opts TemporalOptions, path string) (*slog.Logger, *os.File, error) {
	if opts.Logger != nil {
		return opts.Logger, nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("open temporal log: %w", err)
	}
	h := slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn})
	return slog.New(h), f, nil
}
