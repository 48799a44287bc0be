package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

var (
	_ Runtime         = (*gvisor)(nil)
	_ Networker       = (*gvisor)(nil)
	_ DiffSnapshotter = (*gvisor)(nil)
	_ DiskFiller      = (*gvisor)(nil)
)

// gvisor runs each box as a runsc sandbox (systrap platform, loopback-only network). The box's
// root is a host overlayfs of the shared image and the box's disk (see mountOverlay), used by
// runsc as is (--overlay2=none) so that writes land in the disk directory. PID 1 is
// cocoonbox-init from the image, which spawns every command so they survive a restore.
// Sandboxes are started detached and found again through runsc's --root after an engine
// restart. Hibernate is `runsc checkpoint` (the sandbox exits, its memory is freed), Wake is
// `runsc restore` of the same bundle.
type gvisor struct {
	runsc string
	root  string // runsc --root: sandbox state, kept across engine restarts
	index index
	debug bool
	log   *slog.Logger
	net   netctl

	mu    sync.Mutex
	boxes map[string]*gbox
}

// gbox is what the runtime remembers of a box between calls.
type gbox struct {
	spec Spec

	mu     sync.Mutex
	relays map[relayed]bool // open connections, and closed ones whose runsc exec has not exited

	muxMu sync.Mutex // held while the relay mux starts or stops
	mux   *boxMux    // the running relay mux; nil before the first connection and after a stop
	noMux bool       // the box's init has no relay mux (an image older than it)
	keep  bool       // the mux is kept however idle (KeepReady: the box waits in a warm pool)
}

func newGVisor(opts Options) (*gvisor, error) {
	runsc, err := findRunsc(opts.Runsc)
	if err != nil {
		return nil, fmt.Errorf("new gvisor runtime: %w", err)
	}
	if err := volumesSupported(); err != nil {
		return nil, fmt.Errorf("new gvisor runtime: %w", err)
	}
	g := &gvisor{
		runsc: runsc,
		root:  filepath.Join(opts.DataDir, "runsc"),
		index: index{dir: filepath.Join(opts.DataDir, "boxdirs")},
		debug: opts.Debug,
		log:   opts.Logger,
		net:   netctl{cfg: opts.Network},
		boxes: map[string]*gbox{},
	}
	if err := os.MkdirAll(g.root, 0o711); err != nil {
		return nil, fmt.Errorf("new gvisor runtime: %w", err)
	}
	return g, nil
}

// Name implements Runtime.
func (g *gvisor) Name() string { return NameGVisor }

// Close implements io.Closer: it unpins the empty network namespace runsc bind-mounts under its
// --root for the gofers to share, so the data dir can be removed. Boxes keep running, and the
// next sandbox pins a new one. Only a caller that removes the data dir (tests) needs it.
func (g *gvisor) Close() error {
	path := filepath.Join(g.root, "null-netns")
	for mounted(path) {
		if err := unmountLazy(path); err != nil {
			return fmt.Errorf("close gvisor runtime: %w", err)
		}
	}
	return nil
}

// Capabilities implements Runtime.
func (g *gvisor) Capabilities() Capabilities {
	return Capabilities{MemoryHibernate: true, Isolation: IsolationGVisor, Sandboxed: true}
}

// probeSandbox runs a throwaway sandbox, so that the automatic choice fails at startup, saying
// why, on hosts where runsc is present but cannot run (no ptrace, seccomp, namespaces).
func (g *gvisor) probeSandbox(ctx context.Context) error {
	root, err := os.MkdirTemp(filepath.Dir(g.root), "probe-")
	if err != nil {
		return fmt.Errorf("probe runsc: %w", err)
	}
	defer func() { _ = os.RemoveAll(root) }()
	cmd := exec.CommandContext(ctx, g.runsc, "--root", root, "--platform=systrap", "--network=none", "--ignore-cgroups", "do", "true")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("probe runsc: %w: %s", err, lastLine(out))
	}
	return nil
}

// args are runsc's global flags followed by sub. Every command names the same --root and
// platform, so any of them finds the sandboxes the others made; a networked box's (one whose Dir
// has a resolv.conf) run with gVisor's netstack on the NIC of its namespace.
func (g *gvisor) args(dir string, sub ...string) []string {
	network := "--network=none"
	if dir != "" && exists(filepath.Join(dir, resolvConfFile)) {
		network = "--network=sandbox"
	}
	a := []string{"--root", g.root, "--platform=systrap", network, "--overlay2=none", "--host-uds=none"}
	if g.debug && dir != "" {
		a = append(a, "--debug", "--debug-log="+filepath.Join(dir, "logs")+"/")
	}
	return append(a, sub...)
}

// run runs a short runsc command and returns its stdout.
func (g *gvisor) run(ctx context.Context, dir string, sub ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, g.runsc, g.args(dir, sub...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("runsc %s: %w: %s", sub[0], err, lastLine(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// spawn runs a runsc command that leaves a sandbox behind (run, restore). Its stdio is the
// box's console log, never a pipe: the sandbox inherits it and would hold a pipe open forever.
// Setsid keeps the sandbox out of the engine's session, so a Ctrl-C or the engine's death
// does not reach it.
func (g *gvisor) spawn(ctx context.Context, dir string, sub ...string) error {
	path := filepath.Join(dir, consoleFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open console log: %w", err)
	}
	defer func() { _ = f.Close() }()
	start, _ := f.Seek(0, io.SeekEnd)
	cmd := exec.CommandContext(ctx, g.runsc, g.args(dir, sub...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("runsc %s: %w: %s", sub[0], err, lastLine(readFrom(path, start)))
	}
	return nil
}

// runscState is the part of `runsc state` the runtime uses.
type runscState struct {
	Status string `json:"status"` // created, running, stopped, paused
	Pid    int    `json:"pid"`    // the sandbox process on the host
	Bundle string `json:"bundle"`
}

// state asks runsc about the box's sandbox; ok is false when runsc has no such container.
func (g *gvisor) state(ctx context.Context, id string) (st runscState, ok bool, err error) {
	out, err := g.run(ctx, "", "state", id)
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") {
			return st, false, nil
		}
		return st, false, fmt.Errorf("read sandbox state: %w", err)
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, false, fmt.Errorf("read sandbox state: %w", err)
	}
	return st, true, nil
}

// deleteSandbox kills and forgets the box's sandbox; a missing one is fine.
func (g *gvisor) deleteSandbox(ctx context.Context, id string) error {
	_, err := g.run(ctx, "", "delete", "--force", id)
	return err
}

// box finds a box by id: in memory, else through the index a previous engine left.
func (g *gvisor) box(id string) (*gbox, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b := g.boxes[id]; b != nil {
		return b, nil
	}
	dir := g.index.get(id)
	if dir == "" {
		return nil, ErrNotFound
	}
	spec, err := loadSpec(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	spec.Dir = dir
	b := &gbox{spec: spec, relays: map[relayed]bool{}}
	g.boxes[id] = b
	return b, nil
}

// Start implements Runtime.
func (g *gvisor) Start(ctx context.Context, spec Spec) error {
	spec, err := g.prepare(ctx, spec)
	if err != nil {
		return fmt.Errorf("start box %s: %w", spec.ID, err)
	}
	if err := g.spawn(ctx, spec.Dir, "run", "--detach", "--bundle", spec.Dir, spec.ID); err != nil {
		_ = g.deleteSandbox(context.WithoutCancel(ctx), spec.ID)
		return fmt.Errorf("start box %s: %w", spec.ID, err)
	}
	return g.answers(ctx, spec)
}

// prepare makes everything a new sandbox of spec needs before runsc runs or restores it: its
// address, directories, root mount, network namespace and bundle. It returns spec with the
// address it was given.
func (g *gvisor) prepare(ctx context.Context, spec Spec) (Spec, error) {
	if err := checkSpec(spec); err != nil {
		return spec, err
	}
	if spec.Net != nil {
		if !g.net.cfg.Enabled() {
			return spec, ErrNoNetwork
		}
		if err := spec.Net.Egress.Validate(); err != nil {
			return spec, err
		}
		if !spec.Net.Addr.IsValid() {
			addr, err := g.allocAddr(spec.ID)
			if err != nil {
				return spec, err
			}
			n := *spec.Net
			n.Addr = addr
			spec.Net = &n
		}
	}
	if st, ok, err := g.state(ctx, spec.ID); err != nil {
		return spec, err
	} else if ok && st.Status == "running" {
		return spec, errors.New("already running")
	}
	// A sandbox left created or stopped by a crash would hold the id; a memory image from
	// before is stale once the box boots afresh from its disk.
	if err := g.deleteSandbox(ctx, spec.ID); err != nil {
		return spec, err
	}
	_ = os.RemoveAll(filepath.Join(spec.Dir, checkpointDir))
	_ = os.RemoveAll(filepath.Join(spec.Dir, checkpointDir+".restoring"))
	if err := prepareDir(spec); err != nil {
		return spec, err
	}
	if err := g.index.put(spec.ID, spec.Dir); err != nil {
		return spec, err
	}
	g.mu.Lock()
	g.boxes[spec.ID] = &gbox{spec: spec, relays: map[relayed]bool{}}
	g.mu.Unlock()
	if err := mountOverlay(spec); err != nil {
		return spec, err
	}
	if spec.Net != nil {
		if err := g.net.setup(ctx, spec, false); err != nil {
			return spec, err
		}
	}
	return spec, writeBundle(spec)
}

// answers waits until the new sandbox's init runs a command, so callers may exec as soon as
// Start or Restore returns; a sandbox that never answers is removed.
func (g *gvisor) answers(ctx context.Context, spec Spec) error {
	if _, err := g.Exec(ctx, spec.ID, ExecRequest{Argv: []string{"true"}}); err != nil {
		_ = g.deleteSandbox(context.WithoutCancel(ctx), spec.ID)
		return fmt.Errorf("start box %s: init does not answer: %w (console: %s)", spec.ID, err,
			lastLine(readFrom(filepath.Join(spec.Dir, consoleFile), 0)))
	}
	return nil
}

// Hibernate implements Runtime: runsc checkpoint writes the memory image into Dir/checkpoint
// (through a temporary directory, so a half-written image is never taken for a whole one),
// then the sandbox exits and its memory is freed. The disk is untouched: it is on the host.
func (g *gvisor) Hibernate(ctx context.Context, id string) error {
	b, err := g.box(id)
	if err != nil {
		return fmt.Errorf("hibernate box %s: %w", id, err)
	}
	dir := b.spec.Dir
	ckpt := filepath.Join(dir, checkpointDir)
	st, ok, err := g.state(ctx, id)
	if err != nil {
		return fmt.Errorf("hibernate box %s: %w", id, err)
	}
	if !ok || st.Status != "running" {
		if exists(ckpt) {
			return nil
		}
		return fmt.Errorf("hibernate box %s: %w", id, ErrNotRunning)
	}
	if err := b.waitRelays(ctx); err != nil {
		return fmt.Errorf("hibernate box %s: %w", id, err)
	}
	tmp := ckpt + ".tmp"
	_ = os.RemoveAll(tmp)
	_ = os.RemoveAll(ckpt + ".restoring")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return fmt.Errorf("hibernate box %s: %w", id, err)
	}
	if _, err := g.run(ctx, dir, "checkpoint", "--image-path", tmp, id); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("hibernate box %s: %w", id, err)
	}
	_ = os.RemoveAll(ckpt)
	if err := os.Rename(tmp, ckpt); err != nil {
		return fmt.Errorf("hibernate box %s: %w", id, err)
	}
	// The saved sandbox exits by itself; wait for that so its memory is really released, then
	// free the id for the restore.
	if err := waitExit(ctx, st.Pid, 30*time.Second); err != nil {
		g.log.Warn("sandbox still there after checkpoint; deleting it", "id", id, "err", err)
	}
	if err := g.deleteSandbox(ctx, id); err != nil {
		return fmt.Errorf("hibernate box %s: %w", id, err)
	}
	// A sleeping box holds no kernel mount either: Wake mounts its root again before restoring.
	if err := unmountOverlay(dir); err != nil {
		g.log.Warn("unmount hibernated box root; it stays mounted until wake or destroy", "id", id, "err", err)
	}
	return nil
}

// Wake implements Runtime: runsc restore of the same bundle from the memory image, which is
// renamed to checkpoint.restoring first and removed once the sandbox runs: a sandbox running
// beside a plain checkpoint is one that is still exiting after its save, while one running
// beside checkpoint.restoring is a wake the engine did not see finish (see State).
func (g *gvisor) Wake(ctx context.Context, id string) error {
	b, err := g.box(id)
	if err != nil {
		return fmt.Errorf("wake box %s: %w", id, err)
	}
	dir := b.spec.Dir
	ckpt := filepath.Join(dir, checkpointDir)
	restoring := ckpt + ".restoring"
	st, ok, err := g.state(ctx, id)
	if err != nil {
		return fmt.Errorf("wake box %s: %w", id, err)
	}
	if ok && st.Status == "running" && !exists(ckpt) {
		_ = os.RemoveAll(restoring)
		return nil
	}
	if exists(ckpt) {
		_ = os.RemoveAll(restoring)
		if err := os.Rename(ckpt, restoring); err != nil {
			return fmt.Errorf("wake box %s: %w", id, err)
		}
	} else if !exists(restoring) {
		return fmt.Errorf("wake box %s: no memory image: %w", id, ErrNotRunning)
	}
	if ok {
		if err := g.deleteSandbox(ctx, id); err != nil {
			return fmt.Errorf("wake box %s: %w", id, g.unrestore(dir, err))
		}
	}
	// Registering again marks the image used now (and puts back a link lost by hand); after a
	// host reboot the overlay is gone, and the restore needs the same root back.
	if err := registerImageUse(b.spec); err != nil {
		return fmt.Errorf("wake box %s: %w", id, g.unrestore(dir, err))
	}
	if err := mountOverlay(b.spec); err != nil {
		return fmt.Errorf("wake box %s: %w", id, g.unrestore(dir, err))
	}
	if b.spec.Net != nil {
		// runsc took the address and route into the saved netstack; the namespace needs them
		// back for the restore (and is made again after a host reboot).
		if err := g.net.setup(ctx, b.spec, true); err != nil {
			return fmt.Errorf("wake box %s: %w", id, g.unrestore(dir, err))
		}
	}
	if err := g.spawn(ctx, dir, "restore", "--detach", "--bundle", dir, "--image-path", restoring, id); err != nil {
		_ = g.deleteSandbox(context.WithoutCancel(ctx), id)
		return fmt.Errorf("wake box %s: %w", id, g.unrestore(dir, err))
	}
	// The restored sandbox may still be paging the image in; it holds the files open.
	if err := os.RemoveAll(restoring); err != nil {
		g.log.Warn("remove memory image after restore", "id", id, "err", err)
	}
	return nil
}

// unrestore puts the memory image back after a failed wake, so the box stays hibernated and the
// next wake tries again; it returns err.
func (g *gvisor) unrestore(dir string, err error) error {
	ckpt := filepath.Join(dir, checkpointDir)
	if rerr := os.Rename(ckpt+".restoring", ckpt); rerr != nil && !os.IsNotExist(rerr) {
		g.log.Warn("put memory image back after a failed wake", "dir", dir, "err", rerr)
	}
	return err
}

// Snapshot implements Runtime. The disk is the box's to write, so it is copied only while the
// box cannot change it: a running sandbox is synced (flushing what gVisor may still cache for
// memory-mapped files) and paused for the copy, then resumed; a hibernated or stopped box has no
// process left to write.
func (g *gvisor) Snapshot(ctx context.Context, id, dst string) error {
	return g.snapshot(ctx, id, dst, nil)
}

// SnapshotSince implements DiffSnapshotter.
func (g *gvisor) SnapshotSince(ctx context.Context, id, dst string, base []byte) error {
	if base == nil {
		return fmt.Errorf("snapshot box %s: no base index", id)
	}
	return g.snapshot(ctx, id, dst, base)
}

func (g *gvisor) snapshot(ctx context.Context, id, dst string, base []byte) error {
	b, err := g.box(id)
	if err != nil {
		return fmt.Errorf("snapshot box %s: %w", id, err)
	}
	st, ok, err := g.state(ctx, id)
	if err != nil {
		return fmt.Errorf("snapshot box %s: %w", id, err)
	}
	if ok && st.Status == "running" {
		if _, err := g.Exec(ctx, id, ExecRequest{Argv: []string{"sync"}}); err != nil {
			g.log.Warn("sync before snapshot", "id", id, "err", err)
		}
		if _, err := g.run(ctx, b.spec.Dir, "pause", id); err != nil {
			return fmt.Errorf("snapshot box %s: %w", id, err)
		}
		defer func() {
			if _, err := g.run(context.WithoutCancel(ctx), b.spec.Dir, "resume", id); err != nil {
				g.log.Error("resume box after snapshot", "id", id, "err", err)
			}
		}()
	} else if ok && st.Status == "paused" {
		return fmt.Errorf("snapshot box %s: the sandbox is paused by another copy", id)
	} else if err := mountDisk(b.spec.Dir); err != nil { // a sleeping box's disk is not mounted
		return fmt.Errorf("snapshot box %s: %w", id, err)
	} else {
		defer func() {
			if err := unmountOverlay(b.spec.Dir); err != nil {
				g.log.Warn("unmount disk after snapshot", "id", id, "err", err)
			}
		}()
	}
	if err := copyDiskSince(ctx, b.spec.Dir, dst, base); err != nil {
		return fmt.Errorf("snapshot box %s: %w", id, err)
	}
	return nil
}

// Seed implements Runtime.
func (g *gvisor) Seed(ctx context.Context, spec Spec, src string) error {
	return seedDisk(ctx, spec, src)
}

// Fill implements DiskFiller.
func (g *gvisor) Fill(ctx context.Context, spec Spec, fill func(ctx context.Context, disk string) error) error {
	return fillDisk(ctx, spec, fill)
}

// Destroy implements Runtime.
func (g *gvisor) Destroy(ctx context.Context, id string) error {
	dir := ""
	if b, err := g.box(id); err == nil {
		dir = b.spec.Dir
		b.closeRelays()
		b.stopMux(nil)
	}
	if dir == "" {
		if st, ok, err := g.state(ctx, id); err == nil && ok {
			dir = st.Bundle
		}
	}
	if err := g.deleteSandbox(ctx, id); err != nil {
		return fmt.Errorf("destroy box %s: %w", id, err)
	}
	if err := g.net.teardown(ctx, id); err != nil {
		return fmt.Errorf("destroy box %s: %w", id, err)
	}
	if dir != "" {
		if err := unmountOverlay(dir); err != nil {
			return fmt.Errorf("destroy box %s: %w", id, err)
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("destroy box %s: %w", id, err)
		}
	}
	g.index.remove(id)
	g.mu.Lock()
	delete(g.boxes, id)
	g.mu.Unlock()
	return nil
}

// State implements Runtime.
func (g *gvisor) State(ctx context.Context, id, dir string) (State, error) {
	if dir != "" && exists(filepath.Join(dir, specFile)) {
		if err := g.index.put(id, dir); err != nil {
			return "", fmt.Errorf("read box state %s: %w", id, err)
		}
	}
	st, ok, err := g.state(ctx, id)
	if err != nil {
		return "", fmt.Errorf("read box state %s: %w", id, err)
	}
	if dir == "" {
		dir = g.index.get(id)
	}
	ckpt := exists(filepath.Join(dir, checkpointDir))
	restoring := filepath.Join(dir, checkpointDir+".restoring")
	if ok && st.Status == "paused" && !ckpt {
		// An engine that died during a snapshot's copy left the box paused.
		if _, err := g.run(ctx, dir, "resume", id); err != nil {
			return "", fmt.Errorf("read box state %s: %w", id, err)
		}
		st.Status = "running"
	}
	switch {
	case ok && st.Status == "running" && !ckpt:
		_ = os.RemoveAll(restoring) // a wake that finished after all
		return StateRunning, nil
	case ok:
		// Created but never started, dead, or saved and exiting: nothing to keep but the files.
		if err := g.deleteSandbox(ctx, id); err != nil {
			return "", fmt.Errorf("read box state %s: %w", id, err)
		}
	}
	if !ckpt && exists(restoring) { // a wake that never finished: the image is still good
		_ = g.unrestore(dir, nil)
		ckpt = true
	}
	switch {
	case dir == "":
		return StateMissing, nil
	case ckpt:
		return StateHibernated, nil
	case hasDisk(dir):
		return StateStopped, nil
	}
	return StateMissing, nil
}

// Stats implements Runtime: the sandbox's cgroup (sentry, gofer and the box's memory file).
// A hibernated or stopped box uses nothing.
func (g *gvisor) Stats(ctx context.Context, id string) (Stats, error) {
	b, err := g.box(id)
	if err != nil {
		return Stats{}, fmt.Errorf("read box stats %s: %w", id, err)
	}
	used, err := cgroupMemory(cgroupPath(id))
	if err != nil {
		return Stats{}, fmt.Errorf("read box stats %s: %w", id, err)
	}
	st := Stats{MemUsedBytes: used}
	st.DiskUsedBytes, st.DiskBytes, st.DiskMeasured = volumeUsage(b.spec.Dir)
	return st, nil
}

// lastLine is the last non-empty line of a command's output: runsc ends with the error.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
