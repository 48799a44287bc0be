package images

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomhand/cocoonbox/image"
)

// TestRecipeHashMatchesBuildScript keeps the Go hash and build.sh's in step: if they drift, the
// engine looks for an image directory that make image never creates.
func TestRecipeHashMatchesBuildScript(t *testing.T) {
	want, err := image.RecipeHash("base")
	if err != nil {
		t.Fatal(err)
	}
	// Run only build.sh's recipe_hash function, from the source tree.
	script := `set -euo pipefail; here=$PWD; name=base; ` +
		`eval "$(sed -n '/^recipe_hash() {/,/^}/p' build.sh)"; recipe_hash`
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = filepath.Join("..", "..", "..", "image")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run recipe_hash: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("build.sh hash %s, Go hash %s", got, want)
	}
}

func TestResolve(t *testing.T) {
	cache := t.TempDir()
	_, err := Resolve(cache, "base")
	if !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "run make image") {
		t.Fatalf("missing image: got %v, want ErrNotBuilt saying run make image", err)
	}
	hash, err := image.RecipeHash("base")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(cache, "base-"+hash, "rootfs")
	if err := os.MkdirAll(want, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Resolve(cache, "base")
	if err != nil || got != want {
		t.Fatalf("Resolve = %q, %v; want %q", got, err, want)
	}
	if _, err := Resolve(cache, "no-such-image"); err == nil {
		t.Fatal("unknown image resolved")
	}
	if _, err := Resolve(cache, "../base"); err == nil {
		t.Fatal("path-like image name resolved")
	}
}
