package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Options configure a runtime.
type Options struct {
	// DataDir holds the runtime's own state: runsc's --root (runsc/) and the index of box
	// directories (boxdirs/). It must survive engine restarts for boxes to be re-adopted; give
	// the runtime a directory of its own (say <engine dir>/runtime), apart from the box dirs.
	DataDir string
	// Runsc is the runsc binary. Empty: .bin/runsc in the source tree above the executable or
	// the working directory (where make deps builds it), then runsc on PATH.
	Runsc string
	// Debug makes runsc write its debug logs under each box's Dir/logs/.
	Debug bool
	// Logger receives the runtime's log lines; nil discards them.
	Logger *slog.Logger
	// InsecureNoIsolation allows the process runtime, whose only boundary is the host kernel's
	// namespaces: a box's root there is confined but shares the host's kernel. Without it New
	// refuses "process".
	InsecureNoIsolation bool
	// Network gives boxes whose Spec has a Net a NIC (gvisor only); zero: no box has one.
	Network Network
}

// Runtime names accepted by New.
const (
	NameGVisor  = "gvisor"
	NameProcess = "process"
)

// New returns the runtime called name: "gvisor", "process" (only with
// Options.InsecureNoIsolation), or "" for gvisor when runsc is found and can start a sandbox on
// this host, else an error saying why. There is no silent fallback to a weaker boundary.
func New(name string, opts Options) (Runtime, error) {
	if opts.DataDir == "" {
		return nil, errors.New("new runtime: no data dir")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	switch name {
	case NameGVisor:
		return newGVisor(opts)
	case NameProcess:
		if !opts.InsecureNoIsolation {
			return nil, errors.New("new runtime: process runs boxes on the host kernel with no sandbox; " +
				"choose it only together with the no isolation option (--insecure-no-isolation, config insecure_no_isolation)")
		}
		opts.Logger.Warn("process runtime: boxes share the host kernel with no sandbox; one user only")
		return newProcess(opts)
	case "":
		rt, err := newGVisor(opts)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err = rt.probeSandbox(ctx); err == nil {
				return rt, nil
			}
		}
		return nil, fmt.Errorf("new runtime: auto needs gvisor, which cannot run here: %w; fix runsc (make deps), "+
			"or choose runtime process with no isolation (--runtime process --insecure-no-isolation)", err)
	}
	return nil, fmt.Errorf("new runtime: unknown runtime %q (want gvisor or process)", name)
}

// findRunsc locates runsc: the configured path, then .bin/runsc in a directory above the
// executable or the working directory (the source tree make deps filled), then PATH.
func findRunsc(configured string) (string, error) {
	if configured != "" {
		if _, err := os.Stat(configured); err != nil {
			return "", fmt.Errorf("find runsc: %w", err)
		}
		return configured, nil
	}
	var starts []string
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for {
			p := filepath.Join(dir, ".bin", "runsc")
			if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
				return p, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	p, err := exec.LookPath("runsc")
	if err != nil {
		return "", fmt.Errorf("find runsc: not in .bin (run make deps) nor on PATH: %w", err)
	}
	return p, nil
}
