package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// A box's Dir, the same for both runtimes:
//
//	disk.img     the box's disk: a sparse ext4 image of its quota (see volume_linux.go)
//	vol/         where disk.img is mounted while the engine uses it, holding
//	vol/disk/    the writable overlay layer: the box's files, what Snapshot copies
//	vol/work/    overlayfs's work directory (scratch, never copied)
//	rootfs/      the overlay mount point: the box's root filesystem
//	box.json     the Spec, so a restarted engine can wake or stop the box by id alone
//	config.json  the OCI spec (gvisor)
//	checkpoint/  the memory image of a hibernated box (gvisor)
//	console.log  the init's output and runsc's errors
const (
	volumeImage   = "disk.img"
	volumeDir     = "vol"
	diskDir       = "disk"
	workDir       = "work"
	rootfsDir     = "rootfs"
	specFile      = "box.json"
	checkpointDir = "checkpoint"
	consoleFile   = "console.log"
)

var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// checkSpec rejects a spec the runtime cannot start, before anything is created.
func checkSpec(spec Spec) error {
	switch {
	case !validID.MatchString(spec.ID):
		return fmt.Errorf("bad box id %q", spec.ID)
	case !filepath.IsAbs(spec.Dir) || !filepath.IsAbs(spec.Rootfs):
		return fmt.Errorf("box dir %q and rootfs %q must be absolute", spec.Dir, spec.Rootfs)
	case spec.VCPUs <= 0 || spec.MemoryMB <= 0 || spec.DiskMB <= 0:
		return fmt.Errorf("bad size: %d vCPUs, %d MiB of memory, %d MiB of disk", spec.VCPUs, spec.MemoryMB, spec.DiskMB)
	}
	init := filepath.Join(spec.Rootfs, boxproto.InitPath)
	if fi, err := os.Stat(init); err != nil || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("image %s has no %s: rebuild it with make image", spec.Rootfs, boxproto.InitPath)
	}
	return nil
}

// prepareDir creates a box's directories and disk, registers the box as a user of its image
// (after its Dir exists, so the link never dangles while the box lives) and records its spec.
// An existing disk (a restarted box, or one seeded from a snapshot) is kept as it is.
func prepareDir(spec Spec) error {
	if err := makeDir(spec); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(spec.Dir, rootfsDir), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create box dir: %w", err)
	}
	if err := registerImageUse(spec); err != nil {
		return err
	}
	return saveSpec(spec)
}

// saveSpec writes spec into its Dir, where loadSpec finds it after an engine restart.
func saveSpec(spec Spec) error {
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode spec: %w", err)
	}
	return writeFileAtomic(filepath.Join(spec.Dir, specFile), b)
}

// makeDir creates the box's Dir (the engine's alone: 0700) and its disk image, unless the Dir
// holds a disk already: an image, or the plain disk/ of a box made before disks had quotas,
// which keeps working as it was.
func makeDir(spec Spec) error {
	if err := os.MkdirAll(spec.Dir, 0o700); err != nil {
		return fmt.Errorf("create box dir: %w", err)
	}
	if err := os.Chmod(spec.Dir, 0o700); err != nil {
		return fmt.Errorf("create box dir: %w", err)
	}
	if legacyDisk(spec.Dir) {
		if err := os.Mkdir(filepath.Join(spec.Dir, workDir), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create box dir: %w", err)
		}
		return nil
	}
	return makeVolume(spec.Dir, spec.DiskMB)
}

// legacyDisk reports whether dir is a box made before disks had quotas: its disk is a plain
// directory, dir/disk, beside dir/work. (A directory Snapshot wrote has the same layout.)
func legacyDisk(dir string) bool {
	return !exists(filepath.Join(dir, volumeImage)) && exists(filepath.Join(dir, diskDir))
}

// diskPath is the directory holding a box's files: vol/disk on its volume, or disk/ in a box
// made before quotas and in a directory Snapshot wrote.
func diskPath(dir string) string {
	if exists(filepath.Join(dir, volumeImage)) {
		return filepath.Join(dir, volumeDir, diskDir)
	}
	return filepath.Join(dir, diskDir)
}

// workPath is overlayfs's work directory, on the same filesystem as diskPath.
func workPath(dir string) string {
	if exists(filepath.Join(dir, volumeImage)) {
		return filepath.Join(dir, volumeDir, workDir)
	}
	return filepath.Join(dir, workDir)
}

// hasDisk reports whether dir holds a box's disk.
func hasDisk(dir string) bool {
	return exists(filepath.Join(dir, volumeImage)) || exists(filepath.Join(dir, diskDir))
}

// loadSpec reads the spec Start recorded in dir.
func loadSpec(dir string) (Spec, error) {
	var spec Spec
	b, err := os.ReadFile(filepath.Join(dir, specFile))
	if err != nil {
		return spec, fmt.Errorf("read box spec: %w", err)
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return spec, fmt.Errorf("decode box spec: %w", err)
	}
	return spec, nil
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// index maps box ids to their directories under the runtime's data dir, so that a restarted
// engine can reach a hibernated box, or destroy (and unmount) an orphan, by id alone.
type index struct{ dir string }

func (x index) path(id string) string { return filepath.Join(x.dir, id) }

func (x index) put(id, dir string) error {
	if err := os.MkdirAll(x.dir, 0o755); err != nil {
		return fmt.Errorf("index box: %w", err)
	}
	return writeFileAtomic(x.path(id), []byte(dir))
}

// get returns the box's directory, or "" when the index does not know it.
func (x index) get(id string) string {
	if !validID.MatchString(id) {
		return ""
	}
	b, err := os.ReadFile(x.path(id))
	if err != nil {
		return ""
	}
	return string(b)
}

func (x index) remove(id string) {
	if validID.MatchString(id) {
		_ = os.Remove(x.path(id))
	}
}

// seedDisk is Runtime.Seed of both runtimes: it makes the Dir of spec, which must not hold a
// box yet, with a disk of spec.DiskMB holding the files of from's disk. Nothing is left mounted.
func seedDisk(ctx context.Context, spec Spec, from string) error {
	return fillDisk(ctx, spec, func(ctx context.Context, disk string) error {
		return confinedCopy(ctx, diskPath(from), disk)
	})
}

// fillDisk is DiskFiller.Fill of both runtimes, and seedDisk with its copy as fill.
func fillDisk(ctx context.Context, spec Spec, fill func(ctx context.Context, disk string) error) error {
	if hasDisk(spec.Dir) {
		return fmt.Errorf("seed disk: %s holds a box already", spec.Dir)
	}
	err := mountNewDisk(spec)
	if err == nil {
		err = fill(ctx, diskPath(spec.Dir))
	}
	if uerr := unmountOverlay(spec.Dir); err == nil {
		err = uerr
	}
	if err != nil {
		_ = os.RemoveAll(spec.Dir)
		if strings.Contains(err.Error(), syscall.ENOSPC.Error()) {
			err = fmt.Errorf("%w: the files do not fit in a disk of %d MiB", ErrDiskFull, spec.DiskMB)
		}
		return fmt.Errorf("seed disk: %w", err)
	}
	return nil
}

// mountNewDisk makes spec's Dir with an empty disk and mounts it.
func mountNewDisk(spec Spec) error {
	if err := makeDir(spec); err != nil {
		return err
	}
	return mountDisk(spec.Dir)
}

// copyDisk copies a box's disk into dst/disk, creating dst (0700) if needed. The disk is
// box-written, so the copy is made by the walker of walk_linux.go (which never follows a
// symlink) in a confined child process (see confine_linux.go), never by a path-following tool
// such as cp -a. The caller makes sure the disk cannot change during the copy, and that it is
// mounted (mountDisk).
func copyDisk(ctx context.Context, dir, dst string) error {
	return copyDiskSince(ctx, dir, dst, nil)
}

// copyDiskSince is copyDisk of what changed since base (an index stream; nil copies all), with
// the index of the whole disk in dst/DiskIndexFile (see SnapshotSince).
func copyDiskSince(ctx context.Context, dir, dst string, base []byte) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return fmt.Errorf("create snapshot dir: %w", err)
	}
	target := filepath.Join(dst, diskDir)
	if err := os.Mkdir(target, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("snapshot into %s: disk already there", dst)
		}
		return fmt.Errorf("create snapshot dir: %w", err)
	}
	if base == nil {
		if err := confinedCopy(ctx, diskPath(dir), target); err != nil {
			_ = os.RemoveAll(target)
			return fmt.Errorf("copy disk: %w", err)
		}
		return nil
	}
	index := filepath.Join(dst, DiskIndexFile)
	f, err := os.OpenFile(index, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		_ = os.RemoveAll(target)
		return fmt.Errorf("copy disk: %w", err)
	}
	err = confinedCopySince(ctx, diskPath(dir), target, base, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.RemoveAll(target)
		_ = os.Remove(index)
		return fmt.Errorf("copy what changed of the disk: %w", err)
	}
	return nil
}

// readFrom returns what was appended to a log file since offset start (at most 4 KiB of its
// end), for error messages from runsc.
func readFrom(path string, start int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err == nil && fi.Size()-start > 4096 {
		start = fi.Size() - 4096
	}
	b, _ := io.ReadAll(io.NewSectionReader(f, start, 4096))
	return b
}
