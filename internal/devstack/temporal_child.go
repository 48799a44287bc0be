package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/loomhand/cocoonbox/internal/config"
	"github.com/loomhand/cocoonbox/internal/subproc"
)

// temporalChildArg, as the first argument, runs the executable as the dev stack's Temporal child.
const temporalChildArg = "__cocoonbox-temporal-child"

func init() { subproc.Main(temporalChildArg, runTemporalChild) }

// temporalChild is the embedded Temporal server and its UI, run as a child process of the dev
// stack, so its death (a crash, the OOM killer) is a supervised restart on the same ports and
// SQLite file: clients and workers reconnect, and no workflow loses a step.
type temporalChild struct {
	subproc.Child[temporalReply]
	first temporalReply
}

// temporalChildConfig is what the Temporal child runs with.
type temporalChildConfig struct {
	Options  TemporalOptions `json:"options"`
	LogLevel slog.Level      `json:"log_level"`
}

// temporalReply is the child's line once Temporal serves, or why it could not.
type temporalReply struct {
	Client      config.Temporal `json:"client"`
	UIURL       string          `json:"ui_url,omitempty"`
	UITokenPath string          `json:"ui_token_path,omitempty"`
	Error       string          `json:"error,omitempty"`
}

// temporalStopGrace bounds a graceful stop of the Temporal child.
const temporalStopGrace = time.Minute

// startTemporalChild starts Temporal in a child and returns once it serves.
func startTemporalChild(ctx context.Context, opts TemporalOptions, log *slog.Logger) (*temporalChild, error) {
	cfg := temporalChildConfig{Options: opts, LogLevel: lowestLevel(log)}
	t := &temporalChild{}
	t.Spec = subproc.Spec{Name: "temporal", Arg: temporalChildArg, Config: &cfg, Log: log,
		Stop: syscall.SIGTERM, Grace: temporalStopGrace}
	t.Ready = func(r temporalReply) error {
		if r.Error != "" {
			return fmt.Errorf("%s", r.Error)
		}
		return nil
	}
	r, err := t.Start(ctx)
	if err != nil {
		return nil, err
	}
	t.first = r
	// A restart listens where clients already point.
	if cfg.Options.Port, err = portOf(r.Client.Address); err != nil {
		_ = t.Stop()
		return nil, err
	}
	if r.UIURL != "" {
		u, err := url.Parse(r.UIURL)
		if err == nil {
			cfg.Options.UIPort, err = portOf(u.Host)
		}
		if err != nil {
			_ = t.Stop()
			return nil, fmt.Errorf("temporal ui url %q: %w", r.UIURL, err)
		}
	}
	return t, nil
}

func portOf(hostport string) (int, error) {
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(p)
}

// ClientConfig is how clients dial the frontend.
func (t *temporalChild) ClientConfig() config.Temporal { return t.first.Client }

// UIURL is the Web UI's base URL, "" without one.
func (t *temporalChild) UIURL() string { return t.first.UIURL }

// UITokenPath is the file with the UI's login token, "" when it asks for none.
func (t *temporalChild) UITokenPath() string { return t.first.UITokenPath }

// runTemporalChild is the Temporal child: start the server, say where it serves, and on SIGTERM
// stop it. When its stdin closes (the dev stack died) it exits at once, as the server inside a
// killed process would have: SQLite's journal keeps every committed step for the next start.
func runTemporalChild(in io.Reader, out, errOut io.Writer, _ []*os.File) int {
	signal.Ignore(os.Interrupt) // the parent owns Ctrl-C and stops us in order
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	enc := json.NewEncoder(out)
	dec := json.NewDecoder(in)
	var cfg temporalChildConfig
	if err := dec.Decode(&cfg); err != nil {
		_ = enc.Encode(temporalReply{Error: "temporal: read configuration: " + err.Error()})
		return 2
	}
	cfg.Options.Logger = subproc.Logger(errOut, cfg.LogLevel)
	t, err := StartTemporal(context.Background(), cfg.Options)
	if err != nil {
		_ = enc.Encode(temporalReply{Error: err.Error()})
		return 1
	}
	_ = enc.Encode(temporalReply{Client: t.ClientConfig(), UIURL: t.UIURL(), UITokenPath: t.UITokenPath()})
	eof := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, io.MultiReader(dec.Buffered(), in)); close(eof) }()
	select {
	case <-eof:
		return 1
	case <-term:
	}
	if err := t.Stop(); err != nil {
		cfg.Options.Logger.Error("temporal stop", "error", err)
		return 1
	}
	return 0
}
