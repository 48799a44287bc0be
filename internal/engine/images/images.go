// Package images maps an image name to the root filesystem the engine starts boxes from. Images
// are built by image/build.sh (make image) into a cache keyed by the hash of their recipe; this
// package computes the same hash from the recipes compiled into the binary, so an engine only
// ever runs the image version it was built for and says how to get it when it is missing.
package images

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/loomhand/cocoonbox/image"
)

// ErrNotBuilt is returned by Resolve when the image for the current recipe is not in the cache.
var ErrNotBuilt = errors.New("not built")

// DefaultCacheDir is where image/build.sh puts images when COCOONBOX_IMAGE_CACHE is not set:
// ~/.cache/cocoonbox/images. The caller reads that variable (through internal/config) and
// passes its value to Resolve instead when it is set.
func DefaultCacheDir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find cache dir: %w", err)
	}
	return filepath.Join(dir, "cocoonbox", "images"), nil
}

// Resolve returns the root filesystem of image name built from the current recipe, under
// cacheDir ("" means DefaultCacheDir). The error wraps ErrNotBuilt and says to run make image
// when that build is missing.
func Resolve(cacheDir, name string) (string, error) {
	hash, err := image.RecipeHash(name)
	if err != nil {
		return "", fmt.Errorf("resolve image: %w", err)
	}
	if cacheDir == "" {
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return "", fmt.Errorf("resolve image: %w", err)
		}
	}
	rootfs := filepath.Join(cacheDir, name+"-"+hash, "rootfs")
	if fi, err := os.Stat(rootfs); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("image %s %w: run make image (looked for %s)", name, ErrNotBuilt, rootfs)
	}
	return rootfs, nil
}

// Resolver adapts Resolve to engine.Options.Images: a name no recipe knows wraps
// fs.ErrNotExist, which the engine answers as an unknown template (400); a known image not yet
// built keeps ErrNotBuilt, which the engine answers 503 and logs with the make image hint.
func Resolver(cacheDir string) func(name string) (string, error) {
	return func(name string) (string, error) {
		rootfs, err := Resolve(cacheDir, name)
		if err != nil && !errors.Is(err, ErrNotBuilt) {
			return "", fmt.Errorf("%w: %w", fs.ErrNotExist, err)
		}
		return rootfs, err
	}
}
