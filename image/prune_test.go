package image

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBuildPrunesUnusedImages runs build.sh on a temporary cache where the current base image
// is already built, so it only prunes: every other base-<hash> that no box uses (no users/ link
// resolving to a directory) and that nothing used for an hour goes, with one stderr line each,
// along with leftovers of an interrupted prune; everything else stays.
func TestBuildPrunesUnusedImages(t *testing.T) {
	hash, err := RecipeHash("base")
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	liveBox := t.TempDir()
	old := time.Now().Add(-2 * time.Hour)

	// image makes an image dir with a rootfs and the given users/ links (nil: no users/, as
	// images built before registration), last used at the given time.
	image := func(name string, users []string, used time.Time) {
		t.Helper()
		dir := filepath.Join(cache, name)
		if err := os.MkdirAll(filepath.Join(dir, "rootfs", "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		stamp := dir
		if users != nil {
			stamp = filepath.Join(dir, "users")
			if err := os.Mkdir(stamp, 0o755); err != nil {
				t.Fatal(err)
			}
			for i, target := range users {
				if err := os.Symlink(target, filepath.Join(stamp, "u"+string(rune('0'+i)))); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.Chtimes(stamp, used, used); err != nil {
			t.Fatal(err)
		}
	}
	image("base-"+hash, []string{filepath.Join(cache, "gone")}, old)                 // the one asked for
	image("base-aaaaaaaaaaa1", []string{}, old)                                      // unused
	image("base-aaaaaaaaaaa2", nil, old)                                             // from before users/: kept
	image("base-aaaaaaaaaaa3", []string{filepath.Join(cache, "gone"), liveBox}, old) // a live box
	image("base-aaaaaaaaaaa4", []string{filepath.Join(cache, "gone")}, old)          // a destroyed box
	image("base-aaaaaaaaaaa5", []string{}, time.Now())                               // returned just now elsewhere
	image("desktop-aaaaaaaaaaa6", []string{}, old)                                   // another image
	image("base-notahash", []string{}, old)                                          // not an image version
	image(".base-aaaaaaaaaaa7.Ab3dEf", []string{}, old)                              // a build in progress
	image(".base-aaaaaaaaaaa8.pruned.Xy12Ab", []string{}, old)                       // an interrupted prune
	image(".base-aaaaaaaaaaa9.pruned.Zz34Cd", []string{liveBox}, old)                // one put back by hand later
	if err := os.Symlink(filepath.Join(cache, "base-aaaaaaaaaaa1"), filepath.Join(cache, "base-bbbbbbbbbbb1")); err != nil {
		t.Fatal(err)
	}

	run := func(env ...string) (stdout, stderr string) {
		t.Helper()
		cmd := exec.Command("bash", "build.sh", "base", cache)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "COCOONBOX_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("build.sh base: %v\n%s", err, errb.String())
		}
		if want := filepath.Join(cache, "base-"+hash, "rootfs") + "\n"; out.String() != want {
			t.Fatalf("build.sh printed %q, want %q", out.String(), want)
		}
		return out.String(), errb.String()
	}
	left := func() []string {
		t.Helper()
		entries, err := os.ReadDir(cache)
		if err != nil {
			t.Fatal(err)
		}
		names := []string{}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".lock") {
				names = append(names, e.Name())
			}
		}
		return names
	}
	all := left()

	// Kept when asked to.
	if _, stderr := run("COCOONBOX_IMAGE_KEEP=1"); stderr != "" {
		t.Errorf("with COCOONBOX_IMAGE_KEEP=1, stderr: %s", stderr)
	}
	if got := left(); !slices.Equal(got, all) {
		t.Fatalf("with COCOONBOX_IMAGE_KEEP=1, left %v, want %v", got, all)
	}

	_, stderr := run()
	pruned := []string{"base-aaaaaaaaaaa1", "base-aaaaaaaaaaa4", ".base-aaaaaaaaaaa8.pruned.Xy12Ab"}
	want := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return slices.Contains(pruned, n) })
	if got := left(); !slices.Equal(got, want) {
		t.Fatalf("left %v, want %v\nstderr: %s", got, want, stderr)
	}
	for _, n := range pruned[:2] {
		if !strings.Contains(stderr, "pruned unused image "+n+"\n") {
			t.Errorf("stderr does not report pruning %s: %s", n, stderr)
		}
	}
	if strings.Count(stderr, "pruned unused image") != 2 {
		t.Errorf("stderr reports other prunes: %s", stderr)
	}
	// Links of boxes that are gone are dropped from the images kept; live ones stay.
	for img, want := range map[string]int{"base-" + hash: 0, "base-aaaaaaaaaaa3": 1} {
		if links, err := os.ReadDir(filepath.Join(cache, img, "users")); err != nil || len(links) != want {
			t.Errorf("%s/users holds %d links (%v), want %d", img, len(links), err, want)
		}
	}
	// The image returned counts as used now, so another checkout's build.sh leaves it a while.
	fi, err := os.Stat(filepath.Join(cache, "base-"+hash, "users"))
	if err != nil || time.Since(fi.ModTime()) > time.Minute {
		t.Errorf("the returned image's users/ was not touched: %v", err)
	}

	// Once its box is gone, the last old image goes too.
	if err := os.Remove(liveBox); err != nil {
		t.Fatal(err)
	}
	_, stderr = run()
	for _, n := range []string{"base-aaaaaaaaaaa3", ".base-aaaaaaaaaaa9.pruned.Zz34Cd"} {
		if slices.Contains(left(), n) {
			t.Errorf("%s left after its box was deleted\nstderr: %s", n, stderr)
		}
	}
	// An image from before registration may still be a hibernated box's: kept, and said so.
	if !slices.Contains(left(), "base-aaaaaaaaaaa2") || !strings.Contains(stderr, "kept 1 base image(s)") {
		t.Errorf("the image from before registration: left %v\nstderr: %s", left(), stderr)
	}
}
