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

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// A box's Dir, the same for both runtimes:
//
//	disk/        the writable overlay layer: the box's disk, what Snapshot copies
//	work/        overlayfs's work directory (scratch, never copied)
//	rootfs/      the overlay mount point: the box's root filesystem
//	box.json     the Spec, so a restarted engine can wake or stop the box by id alone
//	config.json  the OCI spec (gvisor)
//	checkpoint/  the memory image of a hibernated box (gvisor)
//	console.log  the init's output and runsc's errors
const (
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
	case spec.VCPUs <= 0 || spec.MemoryMB <= 0:
		return fmt.Errorf("bad size: %d vCPUs, %d MiB", spec.VCPUs, spec.MemoryMB)
	}
	init := filepath.Join(spec.Rootfs, boxproto.InitPath)
	if fi, err := os.Stat(init); err != nil || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("image %s has no %s: rebuild it with make image", spec.Rootfs, boxproto.InitPath)
	}
	return nil
}

// prepareDir creates a box's directories, registers the box as a user of its image (after its
// Dir exists, so the link never dangles while the box lives) and records its spec. An existing
// disk (a restarted box, or one seeded from a snapshot) is kept as it is.
func prepareDir(spec Spec) error {
	// The Dir is the engine's alone (0700); disk/ keeps 0755, since it is the mode of the box's /.
	if err := os.MkdirAll(spec.Dir, 0o700); err != nil {
		return fmt.Errorf("create box dir: %w", err)
	}
	if err := os.Chmod(spec.Dir, 0o700); err != nil {
		return fmt.Errorf("create box dir: %w", err)
	}
	for _, d := range []struct {
		name string
		perm os.FileMode
	}{{diskDir, 0o755}, {workDir, 0o700}, {rootfsDir, 0o700}} {
		if err := os.Mkdir(filepath.Join(spec.Dir, d.name), d.perm); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create box dir: %w", err)
		}
	}
	if err := registerImageUse(spec); err != nil {
		return err
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode spec: %w", err)
	}
	return writeFileAtomic(filepath.Join(spec.Dir, specFile), b)
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

// CopyDisk copies the disk of from (a box's Dir, or a directory Snapshot wrote) into to/disk,
// creating to (0700) if needed: seeding a new box's Dir from a checkpoint. from must not change
// during the copy (a stopped box, or a checkpoint's own copy).
func CopyDisk(ctx context.Context, from, to string) error { return copyDisk(ctx, from, to) }

// copyDisk copies a box's disk into dst/disk. The disk is box-written, so the copy is made by
// the walker of walk_linux.go (which never follows a symlink) in a confined child process (see
// confine_linux.go), never by a path-following tool such as cp -a. The caller makes sure the disk
// cannot change during the copy.
func copyDisk(ctx context.Context, dir, dst string) error {
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
	if err := confinedCopy(ctx, filepath.Join(dir, diskDir), target); err != nil {
		_ = os.RemoveAll(target)
		return fmt.Errorf("copy disk: %w", err)
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
