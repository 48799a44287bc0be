// Package image carries the box image recipes (image/NAME/), the script that builds them
// (build.sh) and the source of the box init (boxinit/), embedded so that a cocoonbox binary knows
// the hash of the recipes it was built with and can find the matching built image without the
// source tree.
package image

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// files holds every input of every image. A new image's directory must be added here too.
// agent.sum stands for the resident agent's source, which go:embed cannot reach from here: the
// sha256sum lines of its files, written by build.sh (agent_sum there) and checked by a test.
//
//go:generate bash build.sh --agent-sum
//go:embed build.sh boxinit base desktop agent.sum
var files embed.FS

// Names returns the names of the images whose recipes are compiled in, sorted: the templates
// a box can be claimed from.
func Names() []string {
	entries, _ := fs.ReadDir(files, ".")
	names := []string{}
	for _, e := range entries {
		if _, err := fs.Stat(files, e.Name()+"/packages"); e.IsDir() && err == nil {
			names = append(names, e.Name())
		}
	}
	return names
}

// RecipeHash returns the short hash of image name's recipe: the same 12 hex digits that
// build.sh names the built image after (see recipe_hash there; the two must stay in step). For
// an image with the resident agent it covers the agent's source through agent.sum.
func RecipeHash(name string) (string, error) {
	if name == "" || strings.ContainsAny(name, "/.") {
		return "", fmt.Errorf("hash recipe %q: bad image name", name)
	}
	if _, err := fs.Stat(files, name+"/packages"); err != nil {
		return "", fmt.Errorf("hash recipe %q: unknown image", name)
	}
	paths := []string{}
	for _, root := range []string{"boxinit", name} {
		err := fs.WalkDir(files, root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				paths = append(paths, p)
			}
			return err
		})
		if err != nil {
			return "", fmt.Errorf("hash recipe %q: %w", name, err)
		}
	}
	sort.Strings(paths)
	paths = append([]string{"build.sh"}, paths...)
	// An image with the agent (NAME/agent) covers the agent's source, as agent.sum's hash.
	if _, err := fs.Stat(files, name+"/agent"); err == nil {
		paths = append(paths, "agent.sum")
	}

	// Hash what `sha256sum FILES | sha256sum` hashes: one "<hex>  <path>\n" line per file.
	outer := sha256.New()
	for _, p := range paths {
		b, err := files.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("hash recipe %q: %w", name, err)
		}
		sum := sha256.Sum256(b)
		fmt.Fprintf(outer, "%s  %s\n", hex.EncodeToString(sum[:]), p)
	}
	return hex.EncodeToString(outer.Sum(nil))[:12], nil
}
