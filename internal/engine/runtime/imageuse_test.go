package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPrepareDirRegistersImageUse: preparing a box's Dir leaves a link to it in its image's
// users directory, which image/build.sh reads before pruning the image; preparing it again (a
// restart or wake) keeps one link, and a box whose image is gone does not start.
func TestPrepareDirRegistersImageUse(t *testing.T) {
	cache := t.TempDir()
	image := filepath.Join(cache, "base-0123456789ab")
	for _, d := range []string{"rootfs", imageUsersDir} { // build.sh makes users/ with the image
		if err := os.MkdirAll(filepath.Join(image, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	boxes := t.TempDir()
	spec := Spec{ID: "b1", Dir: filepath.Join(boxes, "b1"), Rootfs: filepath.Join(image, "rootfs"), VCPUs: 1, MemoryMB: 64, DiskMB: 16}

	users := filepath.Join(image, imageUsersDir)
	for range 2 {
		if err := prepareDir(spec); err != nil {
			t.Fatalf("prepareDir: %v", err)
		}
		entries, err := os.ReadDir(users)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Fatalf("users/ holds %d entries, want 1", len(entries))
		}
		link := filepath.Join(users, entries[0].Name())
		if target, err := os.Readlink(link); err != nil || target != spec.Dir {
			t.Fatalf("users/%s -> %q (%v), want %q", entries[0].Name(), target, err, spec.Dir)
		}
		if fi, err := os.Stat(link); err != nil || !fi.IsDir() {
			t.Fatalf("users/%s does not resolve to the box's Dir: %v", entries[0].Name(), err)
		}
	}

	// A link of the box's name that points elsewhere is replaced.
	link := filepath.Join(users, imageUseName(spec.Dir))
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(boxes, "elsewhere"), link); err != nil {
		t.Fatal(err)
	}
	if err := prepareDir(spec); err != nil {
		t.Fatalf("prepareDir over a stale link: %v", err)
	}
	if target, _ := os.Readlink(link); target != spec.Dir {
		t.Fatalf("stale link not replaced: -> %q", target)
	}

	// Another box of the same image gets its own link.
	other := spec
	other.ID, other.Dir = "b2", filepath.Join(boxes, "b2")
	if err := prepareDir(other); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(users); len(entries) != 2 {
		t.Fatalf("users/ holds %d entries after a second box, want 2", len(entries))
	}

	// A pruned image fails the start and is not recreated as an empty directory.
	gone := other
	gone.ID, gone.Dir = "b3", filepath.Join(boxes, "b3")
	gone.Rootfs = filepath.Join(cache, "base-ba9876543210", "rootfs")
	err := prepareDir(gone)
	if err == nil || !strings.Contains(err.Error(), "is gone") {
		t.Fatalf("prepareDir with a missing image: %v, want an error saying it is gone", err)
	}
	if exists(filepath.Dir(gone.Rootfs)) {
		t.Fatal("registering recreated a missing image's directory")
	}

	// An image dir whose rootfs was moved away after the users dir was read is caught too.
	half := filepath.Join(cache, "base-cccccccccccc")
	if err := os.MkdirAll(filepath.Join(half, imageUsersDir), 0o755); err != nil {
		t.Fatal(err)
	}
	gone.Rootfs = filepath.Join(half, "rootfs")
	if err := prepareDir(gone); err == nil {
		t.Fatal("prepareDir succeeded on an image without a rootfs")
	}

	// An image built before registration (no users/) starts boxes and stays without users/:
	// a first link would make it prunable under the older engines' boxes that have none.
	legacy := filepath.Join(cache, "base-dddddddddddd")
	if err := os.MkdirAll(filepath.Join(legacy, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := other
	old.ID, old.Dir, old.Rootfs = "b4", filepath.Join(boxes, "b4"), filepath.Join(legacy, "rootfs")
	if err := prepareDir(old); err != nil {
		t.Fatalf("prepareDir on an image from before registration: %v", err)
	}
	if exists(filepath.Join(legacy, imageUsersDir)) {
		t.Fatal("registering gave an image from before registration a users/ directory")
	}

	// Registering marks the image used now, even when the link was there: build.sh spares
	// images used within the hour.
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(users, past, past); err != nil {
		t.Fatal(err)
	}
	if err := prepareDir(spec); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(users); err != nil || time.Since(fi.ModTime()) > time.Minute {
		t.Fatalf("users/ not marked used by a registration: %v", err)
	}
}
