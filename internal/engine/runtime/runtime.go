// Package runtime runs boxes for the local sandbox engine. A Runtime turns an image rootfs and a
// per-box directory into an isolated box that can run commands, accept relayed connections on its
// loopback, hibernate and wake. gVisor (runsc) is the default and the only sandbox; the process
// runtime (host kernel namespaces, no sandbox, no memory hibernate) runs only when asked for
// by name with the explicit no-isolation option. New chooses, and never falls back.
//
// Choices both runtimes share, and why:
//
//   - The box's root is a host overlayfs: the shared read-only image below, the box's disk
//     (Dir/vol/disk) above. The disk is then a plain host directory that outlives the box's
//     processes, is never part of a memory image (checkpoints stay small and the disk survives
//     a lost one), and can be copied with the box frozen only for the copy (Snapshot). It is on
//     a loop-mounted ext4 filesystem of the box's quota (see volume_linux.go), so a box that
//     fills its disk fills only that. runsc's
//     own --overlay2 was tried: checkpoint/restore works, but its upper layer is a
//     gVisor-internal file, so the disk would live inside the memory image and die with the
//     sandbox.
//   - PID 1 is cocoonbox-init, built from image/boxinit into every image. Commands are its
//     children, because gVisor kills every process descended from `runsc exec` when it restores a
//     checkpoint: with `sleep infinity` as init, nothing a user started would survive a wake.
//   - The engine reaches the init and the box's loopback without any host socket bound inside the
//     box (runsc cannot checkpoint one): under gVisor through `runsc exec cocoonbox-init relay …`
//     with a host socket pair as its stdio, closed before a checkpoint; in the process runtime by
//     dialing from a thread that entered the box's network namespace.
//
// Linux only; other systems get stubs so that the engine builds and vets everywhere.
package runtime

import (
	"context"
	"errors"
	"io"
	"net"
)

// Runtime runs boxes. Implementations are safe for concurrent use on different boxes; the engine
// serializes operations on one box.
type Runtime interface {
	// Name is "gvisor" or "process"; /v1/info reports it.
	Name() string
	// Capabilities says what this runtime can really do, so /v1/info never overstates it.
	Capabilities() Capabilities
	// Start creates and starts the box described by spec. The box's writable layer (its disk)
	// lives under spec.Dir and survives Stop, Hibernate and engine restarts. Starting a box whose
	// Dir already holds a disk (a claim from a checkpoint) keeps that disk.
	Start(ctx context.Context, spec Spec) error
	// Exec runs argv in the box and waits for it. Output goes to the given writers; the engine
	// enforces size caps there. Cancelling ctx kills the child. ErrNotFound when the box is
	// unknown; ErrBadCommand when argv[0] does not exist or cwd is bad.
	Exec(ctx context.Context, id string, req ExecRequest) (exitCode int, err error)
	// Dial opens a byte stream to 127.0.0.1:port inside the box. The connection must support
	// half-close (CloseWrite) so relays can pass EOF each way. ErrPortClosed when nothing
	// listens there. Close every connection before Hibernate: under gVisor a relay holds a host
	// socket inside the box, which runsc cannot checkpoint.
	Dial(ctx context.Context, id string, port int) (HalfCloser, error)
	// Hibernate frees the box's CPU and memory and keeps its state on disk (with memory when
	// Capabilities().MemoryHibernate). Hibernating a hibernated box is a no-op. The gvisor
	// runtime refuses, changing nothing, while a Dial connection or an Exec is open.
	Hibernate(ctx context.Context, id string) error
	// Wake brings a hibernated box back. Waking a running box is a no-op; waking a stopped one
	// is ErrNotRunning (Start it again on its disk instead).
	Wake(ctx context.Context, id string) error
	// Snapshot copies the box's disk into dst (a fresh directory), so a later Start with
	// Spec.Dir seeded from dst (Seed) sees the same files. The box keeps its processes;
	// a running box is frozen for the copy (gvisor: runsc pause; process: the cgroup freezer) so
	// the disk cannot change under it. The disk is the box's to write: it is
	// never walked by a tool that follows symlinks (see copyDisk).
	Snapshot(ctx context.Context, id, dst string) error
	// Seed makes the Dir of a box that does not exist yet hold a disk with the files of src (a
	// directory Snapshot wrote), for a Start on it: a claim from a checkpoint. Files that do not
	// fit in spec.DiskMB are ErrDiskFull; a failed Seed leaves no Dir.
	Seed(ctx context.Context, spec Spec, src string) error
	// Destroy stops the box and removes everything under its Dir. Unknown ids are not an error.
	// Boxes are found by id across engine restarts (the runtime keeps an index under its data
	// directory), so Destroy also cleans up a box the restarted engine has not asked about.
	Destroy(ctx context.Context, id string) error
	// State reports what the runtime sees of a box, so a restarted engine can re-adopt it; it
	// also (re)registers dir as the box's directory. Running: processes up. Hibernated: a
	// memory image (gvisor) or a hibernate mark (process) waits for Wake. Stopped: only the disk
	// is left (host reboot, crash). Missing: not even the disk.
	State(ctx context.Context, id string, dir string) (State, error)
	// Stats reports the box's resource use; a hibernated or stopped box uses nothing.
	Stats(ctx context.Context, id string) (Stats, error)
}

// Spec describes a box to start.
type Spec struct {
	ID       string // sandbox ID (sb_…), unique on this engine
	Dir      string // the box's private directory (writable layer, bundle, checkpoints)
	Rootfs   string // the image's read-only root filesystem, shared by every box of the image
	VCPUs    int
	MemoryMB int
	DiskMB   int      // the disk quota: the size of the filesystem the box's writes land on
	Env      []string // extra environment for the box's init
	Net      *NetSpec // the box's NIC and egress policy; nil: loopback only
}

// Networker is a runtime that can give boxes a NIC (a Spec with a Net); gvisor with an uplink
// is one. Its boxes' egress policy can change while they run.
type Networker interface {
	// Networked reports whether this runtime has an uplink to give boxes.
	Networked() bool
	// SetEgress replaces the egress policy of networked box id, at once and for its life
	// (hibernate and wake keep it). ErrNotFound for an unknown box; ErrNoNetwork for one
	// without a NIC.
	SetEgress(ctx context.Context, id string, e Egress) error
}

// ReadyKeeper is a runtime that can keep a box's way in ready while the box waits in a warm
// pool (gvisor's relay mux, which otherwise stops when idle), so a claim's first exec pays no
// process start.
type ReadyKeeper interface {
	// KeepReady keeps box id's way in ready (starting it when needed) until called with false;
	// an unknown box is ignored.
	KeepReady(id string, keep bool)
}

// Forker is a runtime that can copy a box with its memory, so new boxes go on from the moment
// of the copy with the processes, windows and open files the box had (gvisor: runsc checkpoint
// with --leave-running, and runsc restore under a new id).
type Forker interface {
	// SnapshotMemory is Snapshot with the box's memory image beside its disk in dst. A running
	// box is paused for the copy and goes on; a hibernated one stays asleep, its image copied.
	// It fails, changing nothing, while a Dial connection or an Exec of the box is open (runsc
	// cannot save a box holding host sockets).
	SnapshotMemory(ctx context.Context, id, dst string) error
	// Restore starts a new box from src, a directory SnapshotMemory wrote, whose disk Seed has
	// put in spec.Dir: its processes go on from the copy under spec's id, address and limits.
	Restore(ctx context.Context, spec Spec, src string) error
}

// A DiffSnapshotter copies of a box's disk only what changed since an earlier export of it, so
// the checkpoint of an incremental snapshot pauses a box for that rather than for its whole disk.
type DiffSnapshotter interface {
	// SnapshotSince is Snapshot leaving out every file whose digest (snapshot.Index) equals
	// base's, an index stream of an earlier export, and writing the index of the whole disk to
	// dst/DiskIndexFile. The copy is for an export against base (snapshot.ExportOptions.Taken),
	// not for Seed.
	SnapshotSince(ctx context.Context, id, dst string, base []byte) error
}

// A DiskFiller makes a box's disk from what a function writes into it rather than from a
// directory Snapshot wrote, so a restore unpacks a snapshot straight into the disk its box runs
// on instead of into a checkpoint that a claim then copies whole.
type DiskFiller interface {
	// Fill is Seed with the files fill writes into disk, the box's empty disk directory
	// (mounted while fill runs).
	Fill(ctx context.Context, spec Spec, fill func(ctx context.Context, disk string) error) error
}

// DiskIndexFile is where SnapshotSince writes the index of the whole disk, in its dst.
const DiskIndexFile = "disk.index"

// ExecRequest is one command run in a box.
type ExecRequest struct {
	Argv   []string
	Cwd    string
	Env    []string
	Stdin  io.Reader // nil: empty
	Stdout io.Writer
	Stderr io.Writer
}

// Capabilities are what a runtime can do.
type Capabilities struct {
	MemoryHibernate bool   // Hibernate preserves processes and memory (gvisor: runsc checkpoint)
	Isolation       string // IsolationGVisor or IsolationNone; /v1/info, /healthz and the dev banner show it
	// Sandboxed: a kernel of its own (gVisor's sentry) stands between a box and the host's, so
	// boxes of different users may share the host. False: boxes make system calls to the host
	// kernel itself, and the engine serves one user only.
	Sandboxed bool
}

// Isolation levels runtimes report.
const (
	IsolationGVisor = "gvisor (systrap)"
	IsolationNone   = "none: host kernel namespaces, one user only"
)

// State is a box as the runtime sees it.
type State string

// States.
const (
	StateRunning    State = "running"
	StateHibernated State = "hibernated"
	StateStopped    State = "stopped" // disk present, nothing running, no memory image
	StateMissing    State = "missing" // nothing on disk
)

// Stats is a box's resource use.
type Stats struct {
	MemUsedBytes int64
	// DiskUsedBytes of DiskBytes are the box's disk in use and its size, when DiskMeasured
	// (a box made before disks had quotas has no disk of its own to measure).
	DiskUsedBytes, DiskBytes int64
	DiskMeasured             bool
}

// HalfCloser is a connection that can close its write side alone.
type HalfCloser interface {
	net.Conn
	CloseWrite() error
}

// Errors a runtime returns; the engine maps them to HTTP statuses.
var (
	ErrNotFound   = errors.New("box not found")
	ErrBadCommand = errors.New("bad command")
	ErrNotRunning = errors.New("box is not running")
	// ErrNoNetwork is a Start of a box with a NIC on a runtime that has no uplink to give it.
	ErrNoNetwork  = errors.New("this engine gives boxes no network (no uplink configured)")
	ErrPortClosed = errors.New("nothing listens on that port in the box")
	ErrDiskFull   = errors.New("the disk is full") // files to copy in do not fit in the box's disk
)
