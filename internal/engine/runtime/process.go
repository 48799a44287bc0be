package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

var (
	_ Runtime         = (*process)(nil)
	_ DiffSnapshotter = (*process)(nil)
	_ DiskFiller      = (*process)(nil)
)

// process runs boxes on the host kernel, for hosts where runsc cannot run, and only when asked
// for with the explicit no-isolation option: there is no sandbox kernel between a box and the
// host, so one user's boxes only. Each box is cocoonbox-init in new user, mount, PID, network,
// UTS and IPC namespaces, pivoted into the same overlay as under gVisor, in a cgroup with the
// size tier's limits. Box root is an unprivileged uid on the host (see boxIDBase), the image is
// idmapped beneath the box's disk, /proc and /sys are masked and read-only as OCI runtimes do,
// and a seccomp filter refuses module loading, kexec, bpf, keyrings, perf, mounts and new
// namespaces (see launch). The engine reaches the init's socket and the box's loopback by
// entering the box's network namespace on a dedicated thread, with no process in between.
// There is no memory image: Hibernate stops every process and keeps the disk, and Wake boots
// the box again on it.
type process struct {
	index  index
	log    *slog.Logger
	userns int // a user namespace with the boxes' id mapping, for idmapped mounts of images

	mu    sync.Mutex
	boxes map[string]Spec
}

const (
	procFile       = "process.json" // the init's PID and start time, to find it after a restart
	hibernatedMark = "hibernated"   // present while the box is hibernated (stopped on purpose)
)

// initProc identifies the box's init on the host. The start time guards against a recycled PID.
type initProc struct {
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"`
}

func newProcess(opts Options) (*process, error) {
	if err := processSupported(); err != nil {
		return nil, fmt.Errorf("new process runtime: %w", err)
	}
	if err := volumesSupported(); err != nil {
		return nil, fmt.Errorf("new process runtime: %w", err)
	}
	userns, err := boxUserns()
	if err != nil {
		return nil, fmt.Errorf("new process runtime: %w", err)
	}
	return &process{
		index:  index{dir: filepath.Join(opts.DataDir, "boxdirs")},
		log:    opts.Logger,
		userns: userns,
		boxes:  map[string]Spec{},
	}, nil
}

// Name implements Runtime.
func (p *process) Name() string { return NameProcess }

// Close implements io.Closer like the gvisor runtime's: it lets go of the user namespace it
// idmaps images with. Boxes keep running.
func (p *process) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	fd := p.userns
	p.userns = -1
	return closeUserns(fd)
}

// Capabilities implements Runtime.
func (p *process) Capabilities() Capabilities {
	return Capabilities{MemoryHibernate: false, Isolation: IsolationNone}
}

// box finds a box's spec by id: in memory, else through the index a previous engine left.
func (p *process) box(id string) (Spec, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if spec, ok := p.boxes[id]; ok {
		return spec, nil
	}
	dir := p.index.get(id)
	if dir == "" {
		return Spec{}, ErrNotFound
	}
	spec, err := loadSpec(dir)
	if err != nil {
		return Spec{}, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	spec.Dir = dir
	p.boxes[id] = spec
	return spec, nil
}

// running returns the box's init PID, or 0 when it is not running.
func running(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, procFile))
	if err != nil {
		return 0
	}
	var ip initProc
	if json.Unmarshal(b, &ip) != nil {
		return 0
	}
	if start, ok := procStart(ip.Pid); ok && start == ip.Start {
		return ip.Pid
	}
	return 0
}

// procStart returns a live (not zombie) process's start time in clock ticks since boot.
func procStart(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || f[0][0] == 'Z' || f[0][0] == 'X' {
		return 0, false
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	return start, err == nil
}

// Start implements Runtime.
func (p *process) Start(ctx context.Context, spec Spec) error {
	if err := checkSpec(spec); err != nil {
		return fmt.Errorf("start box: %w", err)
	}
	if spec.Net != nil {
		return fmt.Errorf("start box %s: the process runtime gives boxes no NIC: %w", spec.ID, ErrNoNetwork)
	}
	if running(spec.Dir) != 0 {
		return fmt.Errorf("start box %s: already running", spec.ID)
	}
	if err := prepareDir(spec); err != nil {
		return fmt.Errorf("start box %s: %w", spec.ID, err)
	}
	if err := p.index.put(spec.ID, spec.Dir); err != nil {
		return fmt.Errorf("start box %s: %w", spec.ID, err)
	}
	p.mu.Lock()
	p.boxes[spec.ID] = spec
	p.mu.Unlock()
	if err := mountDisk(spec.Dir); err != nil {
		return fmt.Errorf("start box %s: %w", spec.ID, err)
	}
	lower, err := mountIDMappedImage(spec, p.userns)
	if err != nil {
		return fmt.Errorf("start box %s: %w", spec.ID, err)
	}
	if err := ownDiskRoot(spec); err != nil {
		return fmt.Errorf("start box %s: %w", spec.ID, err)
	}
	root, err := detachedOverlay(spec, lower)
	if err != nil {
		return fmt.Errorf("start box %s: %w", spec.ID, err)
	}
	defer func() { _ = root.Close() }()
	procs, err := createCgroup(cgroupPath(spec.ID), spec.VCPUs, spec.MemoryMB)
	if err != nil {
		return fmt.Errorf("start box %s: %w", spec.ID, err)
	}
	ip, err := startInit(spec, procs, root)
	if err != nil {
		return fmt.Errorf("start box %s: %w", spec.ID, err)
	}
	b, _ := json.Marshal(ip)
	if err := writeFileAtomic(filepath.Join(spec.Dir, procFile), b); err != nil {
		_ = syscall.Kill(ip.Pid, syscall.SIGKILL)
		return fmt.Errorf("start box %s: %w", spec.ID, err)
	}
	_ = os.Remove(filepath.Join(spec.Dir, hibernatedMark))
	// The box is ready when its init runs a command: callers may exec as soon as Start returns.
	if _, err := p.Exec(ctx, spec.ID, ExecRequest{Argv: []string{"true"}}); err != nil {
		p.stop(spec)
		return fmt.Errorf("start box %s: init does not answer: %w (console: %s)", spec.ID, err,
			lastLine(readFrom(filepath.Join(spec.Dir, consoleFile), 0)))
	}
	return nil
}

// stop kills the box's init, which takes its whole PID namespace with it.
func (p *process) stop(spec Spec) {
	if pid := running(spec.Dir); pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = waitExit(context.Background(), pid, 10*time.Second)
	}
	_ = os.Remove(filepath.Join(spec.Dir, procFile))
	// The cgroup empties as the namespace's processes die; removing it may take a moment.
	for i := 0; i < 50; i++ {
		removeCgroup(cgroupPath(spec.ID))
		if !exists(cgroupDir("memory", cgroupPath(spec.ID))) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Exec implements Runtime through the box's init, reached on its abstract socket from inside
// the box's network namespace.
func (p *process) Exec(ctx context.Context, id string, req ExecRequest) (int, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return -1, fmt.Errorf("%w: empty argv", ErrBadCommand)
	}
	pid, err := p.pid(id)
	if err != nil {
		return -1, fmt.Errorf("exec in box %s: %w", id, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := dialIn(ctx, pid, "unix", boxproto.SocketName)
		if err == nil {
			defer func() { _ = conn.Close() }()
			return execOver(ctx, conn, req)
		}
		// Just started: the init has not bound its socket yet.
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) || ctx.Err() != nil {
			return -1, fmt.Errorf("exec in box %s: reach init: %w", id, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Dial implements Runtime: a TCP connection made from inside the box's network namespace, so
// the engine holds a real socket on the box's loopback and CloseWrite is TCP's own.
func (p *process) Dial(ctx context.Context, id string, port int) (HalfCloser, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("dial box %s: bad port %d", id, port)
	}
	pid, err := p.pid(id)
	if err != nil {
		return nil, fmt.Errorf("dial box %s: %w", id, err)
	}
	c, err := dialIn(ctx, pid, "tcp", "127.0.0.1:"+strconv.Itoa(port))
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("dial box %s port %d: %w", id, port, ErrPortClosed)
	}
	if err != nil {
		return nil, fmt.Errorf("dial box %s port %d: %w", id, port, err)
	}
	return c.(HalfCloser), nil
}

// pid returns the running box's init PID.
func (p *process) pid(id string) (int, error) {
	spec, err := p.box(id)
	if err != nil {
		return 0, err
	}
	pid := running(spec.Dir)
	if pid == 0 {
		return 0, ErrNotRunning
	}
	return pid, nil
}

// Hibernate implements Runtime: the processes stop, the disk stays, memory is not kept.
func (p *process) Hibernate(ctx context.Context, id string) error {
	spec, err := p.box(id)
	if err != nil {
		return fmt.Errorf("hibernate box %s: %w", id, err)
	}
	mark := filepath.Join(spec.Dir, hibernatedMark)
	if exists(mark) {
		return nil
	}
	if running(spec.Dir) == 0 {
		return fmt.Errorf("hibernate box %s: %w", id, ErrNotRunning)
	}
	if err := os.WriteFile(mark, nil, 0o644); err != nil {
		return fmt.Errorf("hibernate box %s: %w", id, err)
	}
	p.stop(spec)
	// A sleeping box holds no kernel mount: Wake mounts its disk again.
	if err := unmountOverlay(spec.Dir); err != nil {
		p.log.Warn("unmount hibernated box disk; it stays mounted until wake or destroy", "id", id, "err", err)
	}
	return nil
}

// Wake implements Runtime: the box boots again on its disk.
func (p *process) Wake(ctx context.Context, id string) error {
	spec, err := p.box(id)
	if err != nil {
		return fmt.Errorf("wake box %s: %w", id, err)
	}
	if running(spec.Dir) != 0 {
		return nil
	}
	if !exists(filepath.Join(spec.Dir, hibernatedMark)) {
		return fmt.Errorf("wake box %s: %w", id, ErrNotRunning)
	}
	return p.Start(ctx, spec)
}

// Snapshot implements Runtime.
func (p *process) Snapshot(ctx context.Context, id, dst string) error {
	return p.snapshot(ctx, id, dst, nil)
}

// SnapshotSince implements DiffSnapshotter.
func (p *process) SnapshotSince(ctx context.Context, id, dst string, base []byte) error {
	if base == nil {
		return fmt.Errorf("snapshot box %s: no base index", id)
	}
	return p.snapshot(ctx, id, dst, base)
}

func (p *process) snapshot(ctx context.Context, id, dst string, base []byte) error {
	spec, err := p.box(id)
	if err != nil {
		return fmt.Errorf("snapshot box %s: %w", id, err)
	}
	if running(spec.Dir) != 0 {
		// The box is frozen for the copy, so nothing in it changes the disk under the walker.
		thaw, err := freezeCgroup(cgroupPath(id))
		switch {
		case errors.Is(err, errNoFreezer):
			p.log.Warn("box has no freezer (started by an older engine); copying its disk live", "id", id)
		case err != nil:
			return fmt.Errorf("snapshot box %s: %w", id, err)
		default:
			defer func() {
				if err := thaw(); err != nil {
					p.log.Error("thaw box after snapshot", "id", id, "err", err)
				}
			}()
		}
	} else { // a sleeping box's disk is not mounted
		if err := mountDisk(spec.Dir); err != nil {
			return fmt.Errorf("snapshot box %s: %w", id, err)
		}
		defer func() {
			if err := unmountOverlay(spec.Dir); err != nil {
				p.log.Warn("unmount disk after snapshot", "id", id, "err", err)
			}
		}()
	}
	if err := copyDiskSince(ctx, spec.Dir, dst, base); err != nil {
		return fmt.Errorf("snapshot box %s: %w", id, err)
	}
	return nil
}

// Seed implements Runtime.
func (p *process) Seed(ctx context.Context, spec Spec, src string) error {
	return seedDisk(ctx, spec, src)
}

// Fill implements DiskFiller.
func (p *process) Fill(ctx context.Context, spec Spec, fill func(ctx context.Context, disk string) error) error {
	return fillDisk(ctx, spec, fill)
}

// Destroy implements Runtime.
func (p *process) Destroy(ctx context.Context, id string) error {
	spec, err := p.box(id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("destroy box %s: %w", id, err)
	}
	p.stop(spec)
	if err := unmountOverlay(spec.Dir); err != nil {
		return fmt.Errorf("destroy box %s: %w", id, err)
	}
	if err := unmountImage(spec.Dir); err != nil {
		return fmt.Errorf("destroy box %s: %w", id, err)
	}
	if err := os.RemoveAll(spec.Dir); err != nil {
		return fmt.Errorf("destroy box %s: %w", id, err)
	}
	p.index.remove(id)
	p.mu.Lock()
	delete(p.boxes, id)
	p.mu.Unlock()
	return nil
}

// State implements Runtime.
func (p *process) State(ctx context.Context, id, dir string) (State, error) {
	if dir != "" && exists(filepath.Join(dir, specFile)) {
		if err := p.index.put(id, dir); err != nil {
			return "", fmt.Errorf("read box state %s: %w", id, err)
		}
	}
	if dir == "" {
		dir = p.index.get(id)
	}
	switch {
	case dir == "":
		return StateMissing, nil
	case running(dir) != 0:
		if err := thawCgroup(cgroupPath(id)); err != nil { // an engine that died mid-copy left it frozen
			return "", fmt.Errorf("read box state %s: %w", id, err)
		}
		return StateRunning, nil
	case exists(filepath.Join(dir, hibernatedMark)):
		return StateHibernated, nil
	case hasDisk(dir):
		return StateStopped, nil
	}
	return StateMissing, nil
}

// Stats implements Runtime from the box's cgroup.
func (p *process) Stats(ctx context.Context, id string) (Stats, error) {
	spec, err := p.box(id)
	if err != nil {
		return Stats{}, fmt.Errorf("read box stats %s: %w", id, err)
	}
	if running(spec.Dir) == 0 {
		return Stats{}, nil
	}
	used, err := cgroupMemory(cgroupPath(id))
	if err != nil {
		return Stats{}, fmt.Errorf("read box stats %s: %w", id, err)
	}
	st := Stats{MemUsedBytes: used}
	st.DiskUsedBytes, st.DiskBytes, st.DiskMeasured = volumeUsage(spec.Dir)
	return st, nil
}
