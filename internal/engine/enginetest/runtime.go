// Package enginetest holds a behavioural fake of runtime.Runtime for the engine's tests. It keeps
// real state (boxes with a disk directory, a memory that hibernate keeps or loses, open relay
// connections) and takes fault knobs (fail the next call of an operation, delay one, make a box
// vanish or stop), so tests exercise what the engine does when a runtime misbehaves without
// needing runsc.
package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
	"github.com/loomhand/cocoonbox/internal/snapshot"
)

var (
	_ runtime.Runtime = (*Runtime)(nil)
	_ runtime.Forker  = (*Runtime)(nil)

	_ runtime.DiffSnapshotter = (*Runtime)(nil)
	_ runtime.DiskFiller      = (*Runtime)(nil)
)

// Op names a Runtime method for the fault knobs.
type Op string

// Operations a fault or a delay can target.
const (
	OpStart     Op = "start"
	OpExec      Op = "exec"
	OpDial      Op = "dial"
	OpHibernate Op = "hibernate"
	OpWake      Op = "wake"
	OpSnapshot  Op = "snapshot"
	OpSeed      Op = "seed"
	OpDestroy   Op = "destroy"
	OpState     Op = "state"
	OpStats     Op = "stats"
)

// Runtime is a fake runtime.Runtime. A box's disk is a real directory (Spec.Dir/disk) so
// checkpoints and engine restarts see real files; its memory is a counter that Hibernate keeps
// only when the fake claims MemoryHibernate.
type Runtime struct {
	name string
	caps runtime.Capabilities

	mu    sync.Mutex
	boxes map[string]*box
	fail  map[Op][]error
	delay map[Op]time.Duration
	calls map[Op]int
	ports map[int]net.Listener
	execs int // commands running now, so tests can see a killed child is gone
}

type box struct {
	spec  runtime.Spec
	state runtime.State
	mem   int               // the "process memory": a counter the incr command bumps
	conns map[net.Conn]bool // relay connections handed out by Dial and not yet closed
	execs int               // commands running in this box
	ready bool              // kept ready (runtime.ReadyKeeper), as a warm box is
}

// New returns a fake named "fake" that, like gvisor, keeps memory across hibernate and counts
// as a sandbox (it runs no box code at all), so an engine over it takes tenant tokens.
func New() *Runtime {
	return NewWith("fake", runtime.Capabilities{MemoryHibernate: true, Isolation: "none (fake)", Sandboxed: true})
}

// NewWith returns a fake with the given name and capabilities (e.g. no memory hibernate, as the
// process runtime).
func NewWith(name string, caps runtime.Capabilities) *Runtime {
	return &Runtime{
		name: name, caps: caps,
		boxes: map[string]*box{}, fail: map[Op][]error{}, delay: map[Op]time.Duration{},
		calls: map[Op]int{}, ports: map[int]net.Listener{},
	}
}

// Name implements runtime.Runtime.
func (f *Runtime) Name() string { return f.name }

var _ runtime.ReadyKeeper = (*Runtime)(nil)

// KeepReady implements runtime.ReadyKeeper; KeptReady reports what it was told.
func (f *Runtime) KeepReady(id string, keep bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.boxes[id]; b != nil {
		b.ready = keep
	}
}

// KeptReady reports whether box id is kept ready (KeepReady).
func (f *Runtime) KeptReady(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.boxes[id]
	return b != nil && b.ready
}

// Capabilities implements runtime.Runtime.
func (f *Runtime) Capabilities() runtime.Capabilities { return f.caps }

// FailNext makes the next call of op return err (queued: several calls fail in order).
func (f *Runtime) FailNext(op Op, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[op] = append(f.fail[op], err)
}

// Delay makes every later call of op wait d first (cancelled with its context).
func (f *Runtime) Delay(op Op, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay[op] = d
}

// Calls reports how many times op was called.
func (f *Runtime) Calls(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Vanish makes a box disappear as after a host loss: no process, no disk.
func (f *Runtime) Vanish(id string) {
	f.mu.Lock()
	b := f.boxes[id]
	delete(f.boxes, id)
	f.mu.Unlock()
	if b != nil {
		_ = os.RemoveAll(b.spec.Dir)
	}
}

// Stop kills a box's processes and memory but keeps its disk, as a crash of the box would.
func (f *Runtime) Stop(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.boxes[id]; b != nil {
		b.state, b.mem = runtime.StateStopped, 0
	}
}

// BoxState reports a box's state as the fake sees it; StateMissing when unknown.
func (f *Runtime) BoxState(id string) runtime.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.boxes[id]; b != nil {
		return b.state
	}
	return runtime.StateMissing
}

// Boxes lists the ids of every box the fake holds, sorted.
func (f *Runtime) Boxes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.boxes))
	for id := range f.boxes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// RunningExecs reports how many commands are running now in all boxes.
func (f *Runtime) RunningExecs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.execs
}

// OpenConns reports how many relay connections to the box are open.
func (f *Runtime) OpenConns(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.boxes[id]; b != nil {
		return len(b.conns)
	}
	return 0
}

// ServePort makes port inside every box answer with handle, backed by a real TCP listener on
// the host's loopback so relays carry real bytes.
func (f *Runtime) ServePort(port int, handle func(net.Conn)) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen fake port: %w", err)
	}
	f.mu.Lock()
	f.ports[port] = ln
	f.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return nil
}

// Close stops the fake's port listeners.
func (f *Runtime) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ln := range f.ports {
		_ = ln.Close()
	}
}

// enter counts a call, applies its delay and returns a queued fault, if any.
func (f *Runtime) enter(ctx context.Context, op Op) error {
	f.mu.Lock()
	f.calls[op]++
	d := f.delay[op]
	var err error
	if q := f.fail[op]; len(q) > 0 {
		err, f.fail[op] = q[0], q[1:]
	}
	f.mu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

// Start implements runtime.Runtime.
func (f *Runtime) Start(ctx context.Context, spec runtime.Spec) error {
	if err := f.enter(ctx, OpStart); err != nil {
		return err
	}
	if spec.ID == "" || spec.Dir == "" || spec.Rootfs == "" || spec.VCPUs <= 0 || spec.MemoryMB <= 0 || spec.DiskMB <= 0 {
		return fmt.Errorf("start box: incomplete spec %+v", spec)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.boxes[spec.ID]; b != nil && b.state != runtime.StateStopped {
		return fmt.Errorf("start box %s: already %s", spec.ID, b.state)
	}
	for _, d := range []string{"disk/tmp", "disk/root"} {
		if err := os.MkdirAll(filepath.Join(spec.Dir, d), 0o755); err != nil {
			return fmt.Errorf("start box: %w", err)
		}
	}
	f.boxes[spec.ID] = &box{spec: spec, state: runtime.StateRunning, conns: map[net.Conn]bool{}}
	return nil
}

// running returns a box that must be running; the caller holds f.mu.
func (f *Runtime) running(id string) (*box, error) {
	b := f.boxes[id]
	switch {
	case b == nil:
		return nil, runtime.ErrNotFound
	case b.state != runtime.StateRunning:
		return nil, runtime.ErrNotRunning
	}
	return b, nil
}

// Dial implements runtime.Runtime.
func (f *Runtime) Dial(ctx context.Context, id string, port int) (runtime.HalfCloser, error) {
	if err := f.enter(ctx, OpDial); err != nil {
		return nil, err
	}
	f.mu.Lock()
	b, err := f.running(id)
	ln := f.ports[port]
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if ln == nil {
		return nil, fmt.Errorf("dial 127.0.0.1:%d in %s: %w", port, id, runtime.ErrPortClosed)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{TCPConn: c.(*net.TCPConn), f: f, id: id}
	f.mu.Lock()
	b.conns[tc] = true
	f.mu.Unlock()
	return tc, nil
}

// trackedConn lets the fake see whether relays are still open when the box hibernates, the way
// runsc refuses to checkpoint a box holding host sockets.
type trackedConn struct {
	*net.TCPConn
	f    *Runtime
	id   string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.f.mu.Lock()
		if b := c.f.boxes[c.id]; b != nil {
			delete(b.conns, c)
		}
		c.f.mu.Unlock()
	})
	return c.TCPConn.Close()
}

// Hibernate implements runtime.Runtime.
func (f *Runtime) Hibernate(ctx context.Context, id string) error {
	if err := f.enter(ctx, OpHibernate); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.boxes[id]
	switch {
	case b == nil:
		return runtime.ErrNotFound
	case b.state == runtime.StateHibernated:
		return nil
	case b.state != runtime.StateRunning:
		return runtime.ErrNotRunning
	case len(b.conns) > 0:
		return fmt.Errorf("hibernate box %s: cannot save endpoint with bound host socket (%d open)", id, len(b.conns))
	case b.execs > 0:
		return fmt.Errorf("hibernate box %s: %d commands still running", id, b.execs)
	}
	b.state = runtime.StateHibernated
	if !f.caps.MemoryHibernate {
		b.mem = 0
	}
	return nil
}

// Wake implements runtime.Runtime.
func (f *Runtime) Wake(ctx context.Context, id string) error {
	if err := f.enter(ctx, OpWake); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.boxes[id]
	switch {
	case b == nil:
		return runtime.ErrNotFound
	case b.state == runtime.StateHibernated:
		b.state = runtime.StateRunning
	case b.state != runtime.StateRunning:
		return runtime.ErrNotRunning
	}
	return nil
}

// Snapshot implements runtime.Runtime: it copies the box's disk into dst/disk.
func (f *Runtime) Snapshot(ctx context.Context, id, dst string) error {
	if err := f.enter(ctx, OpSnapshot); err != nil {
		return err
	}
	f.mu.Lock()
	b := f.boxes[id]
	f.mu.Unlock()
	if b == nil {
		return runtime.ErrNotFound
	}
	return copyDir(filepath.Join(b.spec.Dir, "disk"), filepath.Join(dst, "disk"))
}

// SnapshotSince implements runtime.DiffSnapshotter as the real runtimes do, on the fake's
// plain disk: every directory, the files that changed since base, and the index of the whole
// disk beside them.
func (f *Runtime) SnapshotSince(ctx context.Context, id, dst string, base []byte) error {
	if err := f.enter(ctx, OpSnapshot); err != nil {
		return err
	}
	f.mu.Lock()
	b := f.boxes[id]
	f.mu.Unlock()
	if b == nil {
		return runtime.ErrNotFound
	}
	x, err := snapshot.ReadIndex(bytes.NewReader(base), 0)
	if err != nil {
		return err
	}
	ix := snapshot.NewIndexer(x)
	if err := copyDirWhere(filepath.Join(b.spec.Dir, "disk"), filepath.Join(dst, "disk"), ix.Add); err != nil {
		return err
	}
	var index bytes.Buffer
	if err := snapshot.WriteIndex(&index, ix.Index()); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, runtime.DiskIndexFile), index.Bytes(), 0o600)
}

// SnapshotMemory implements runtime.Forker: Snapshot, with the box's counter beside the disk.
// Like runsc, it refuses a box holding connections.
func (f *Runtime) SnapshotMemory(ctx context.Context, id, dst string) error {
	f.mu.Lock()
	b := f.boxes[id]
	var mem, conns int
	if b != nil {
		mem, conns = b.mem, len(b.conns)
	}
	f.mu.Unlock()
	switch {
	case b == nil:
		return runtime.ErrNotFound
	case conns > 0:
		return fmt.Errorf("snapshot box %s with memory: cannot save endpoint with bound host socket (%d open)", id, conns)
	}
	if err := f.Snapshot(ctx, id, dst); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, "memory"), []byte(strconv.Itoa(mem)), 0o600)
}

// Restore implements runtime.Forker: Start, with the counter of src's memory.
func (f *Runtime) Restore(ctx context.Context, spec runtime.Spec, src string) error {
	b, err := os.ReadFile(filepath.Join(src, "memory"))
	if err != nil {
		return fmt.Errorf("restore box %s: %w", spec.ID, err)
	}
	mem, err := strconv.Atoi(string(b))
	if err != nil {
		return fmt.Errorf("restore box %s: %w", spec.ID, err)
	}
	if err := f.Start(ctx, spec); err != nil {
		return err
	}
	f.mu.Lock()
	f.boxes[spec.ID].mem = mem
	f.mu.Unlock()
	return nil
}

// Seed implements runtime.Runtime: it copies src/disk into the new box's disk, refusing files
// that add up to more than spec.DiskMB, as a real disk of that size would.
func (f *Runtime) Seed(ctx context.Context, spec runtime.Spec, src string) error {
	if err := f.enter(ctx, OpSeed); err != nil {
		return err
	}
	size, err := diskBytes(filepath.Join(src, "disk"))
	if err != nil {
		return fmt.Errorf("seed disk: %w", err)
	}
	if size > int64(spec.DiskMB)<<20 {
		return fmt.Errorf("seed disk: %w: %d bytes of files, a disk of %d MiB", runtime.ErrDiskFull, size, spec.DiskMB)
	}
	if err := copyDir(filepath.Join(src, "disk"), filepath.Join(spec.Dir, "disk")); err != nil {
		_ = os.RemoveAll(spec.Dir)
		return fmt.Errorf("seed disk: %w", err)
	}
	return nil
}

// Fill implements runtime.DiskFiller: the fake's disk is the directory fill writes, which may
// hold no more than the disk's size in files.
func (f *Runtime) Fill(ctx context.Context, spec runtime.Spec, fill func(ctx context.Context, disk string) error) error {
	if err := f.enter(ctx, OpSeed); err != nil {
		return err
	}
	disk := filepath.Join(spec.Dir, "disk")
	err := os.MkdirAll(disk, 0o755)
	if err == nil {
		err = fill(ctx, disk)
	}
	var size int64
	if err == nil {
		size, err = diskBytes(disk)
	}
	if err == nil && size > int64(spec.DiskMB)<<20 {
		err = fmt.Errorf("%w: %d bytes of files, a disk of %d MiB", runtime.ErrDiskFull, size, spec.DiskMB)
	}
	if err != nil {
		_ = os.RemoveAll(spec.Dir)
		return fmt.Errorf("fill disk: %w", err)
	}
	return nil
}

// diskBytes is the size of the files under dir.
func diskBytes(dir string) (int64, error) {
	var size int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fi, ierr := d.Info()
			if ierr != nil {
				return ierr
			}
			size += fi.Size()
		}
		return err
	})
	return size, err
}

// Destroy implements runtime.Runtime.
func (f *Runtime) Destroy(ctx context.Context, id string) error {
	if err := f.enter(ctx, OpDestroy); err != nil {
		return err
	}
	f.mu.Lock()
	b := f.boxes[id]
	delete(f.boxes, id)
	f.mu.Unlock()
	if b == nil {
		return nil
	}
	for c := range b.conns {
		_ = c.Close()
	}
	return os.RemoveAll(b.spec.Dir)
}

// State implements runtime.Runtime. A box the fake does not hold but whose disk exists is
// stopped, as after a host reboot.
func (f *Runtime) State(ctx context.Context, id, dir string) (runtime.State, error) {
	if err := f.enter(ctx, OpState); err != nil {
		return "", err
	}
	f.mu.Lock()
	b := f.boxes[id]
	f.mu.Unlock()
	if b != nil {
		return b.state, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "disk")); err == nil {
		return runtime.StateStopped, nil
	}
	return runtime.StateMissing, nil
}

// Stats implements runtime.Runtime.
func (f *Runtime) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	if err := f.enter(ctx, OpStats); err != nil {
		return runtime.Stats{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.running(id)
	if err != nil {
		return runtime.Stats{}, err
	}
	return runtime.Stats{MemUsedBytes: 64 << 20, DiskUsedBytes: 1 << 20, DiskBytes: int64(b.spec.DiskMB) << 20, DiskMeasured: true}, nil
}

// copyDir copies regular files and directories from src to dst, which is what the fake's disk
// holds.
func copyDir(src, dst string) error {
	return copyDirWhere(src, dst, nil)
}

// copyDirWhere is copyDir of the directories and the files keep (nil: all) says to copy.
func copyDirWhere(src, dst string, keep func(p, rel string) (bool, error)) error {
	// Times are kept, as the real runtime's copy keeps them: an incremental export compares them.
	type dirTime struct {
		path  string
		mtime time.Time
	}
	var dirs []dirTime
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if keep != nil {
			if ok, err := keep(p, filepath.ToSlash(rel)); err != nil || !ok && !d.IsDir() {
				return err
			}
		}
		if d.IsDir() {
			dirs = append(dirs, dirTime{target, fi.ModTime()})
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return errors.New("copy disk: only files and directories are supported")
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(target, data, 0o644); err != nil {
			return err
		}
		return os.Chtimes(target, fi.ModTime(), fi.ModTime())
	})
	for i := len(dirs) - 1; i >= 0 && err == nil; i-- {
		err = os.Chtimes(dirs[i].path, dirs[i].mtime, dirs[i].mtime)
	}
	return err
}
