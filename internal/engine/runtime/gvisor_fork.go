package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

var _ Forker = (*gvisor)(nil)

// memoryDir is where SnapshotMemory puts the memory image in its dst, beside the disk.
const memoryDir = "memory"

// SnapshotMemory implements Forker. A running box is synced and paused, so that its disk and
// its memory are of one moment: the disk is copied, then runsc checkpoint --leave-running saves
// the memory of the paused sandbox, and the box goes on. A hibernated box's disk is copied and
// its memory image linked (the image is never written again: a wake only reads it).
func (g *gvisor) SnapshotMemory(ctx context.Context, id, dst string) error {
	b, err := g.box(id)
	if err != nil {
		return fmt.Errorf("snapshot box %s with memory: %w", id, err)
	}
	dir := b.spec.Dir
	st, ok, err := g.state(ctx, id)
	if err != nil {
		return fmt.Errorf("snapshot box %s with memory: %w", id, err)
	}
	switch ckpt := filepath.Join(dir, checkpointDir); {
	case ok && st.Status == "running":
		if err := g.snapshotRunning(ctx, b, dst); err != nil {
			_ = os.RemoveAll(dst)
			return fmt.Errorf("snapshot box %s with memory: %w", id, err)
		}
		return nil
	case exists(ckpt):
		if err := g.Snapshot(ctx, id, dst); err != nil {
			return err
		}
		if err := linkTree(ckpt, filepath.Join(dst, memoryDir)); err != nil {
			_ = os.RemoveAll(dst)
			return fmt.Errorf("snapshot box %s with memory: %w", id, err)
		}
		return nil
	}
	return fmt.Errorf("snapshot box %s with memory: %w", id, ErrNotRunning)
}

func (g *gvisor) snapshotRunning(ctx context.Context, b *gbox, dst string) error {
	id, dir := b.spec.ID, b.spec.Dir
	if err := b.waitRelays(ctx); err != nil {
		return err
	}
	if _, err := g.run(ctx, dir, "pause", id); err != nil {
		return err
	}
	defer func() {
		if st, ok, err := g.state(context.WithoutCancel(ctx), id); err == nil && ok && st.Status == "paused" {
			if _, err := g.run(context.WithoutCancel(ctx), dir, "resume", id); err != nil {
				g.log.Error("resume box after a snapshot with memory", "id", id, "err", err)
			}
		}
	}()
	if err := copyDisk(ctx, dir, dst); err != nil {
		return err
	}
	_, err := g.run(ctx, dir, "checkpoint", "--leave-running", "--image-path", filepath.Join(dst, memoryDir), id)
	return err
}

// Restore implements Forker: Start, with runsc restore of src's memory image in place of run.
func (g *gvisor) Restore(ctx context.Context, spec Spec, src string) error {
	image := filepath.Join(src, memoryDir)
	if !exists(image) {
		return fmt.Errorf("restore box %s: %s holds no memory image", spec.ID, src)
	}
	spec, err := g.prepare(ctx, spec)
	if err != nil {
		return fmt.Errorf("restore box %s: %w", spec.ID, err)
	}
	if err := g.spawn(ctx, spec.Dir, "restore", "--detach", "--bundle", spec.Dir, "--image-path", image, spec.ID); err != nil {
		_ = g.deleteSandbox(context.WithoutCancel(ctx), spec.ID)
		return fmt.Errorf("restore box %s: %w", spec.ID, err)
	}
	return g.answers(ctx, spec)
}

// linkTree makes dst a tree of hard links to the regular files of src (copies where a link
// cannot cross filesystems). src is the engine's own memory image, not a box's disk.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o700)
		case !d.Type().IsRegular():
			return fmt.Errorf("memory image: %s is not a regular file", p)
		}
		if err := os.Link(p, to); err == nil || !errors.Is(err, syscall.EXDEV) {
			return err
		}
		return copyFile(p, to)
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
