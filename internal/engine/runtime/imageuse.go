package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// imageUsersDir is the directory in an image's cache directory (beside its rootfs) where every
// box that runs from the image leaves a symlink to its Dir. image/build.sh prunes an old image
// version only when none of these links resolves to an existing directory: a box, running or
// hibernated, of any engine sharing the cache, uses the image it started from until its Dir is
// deleted.
const imageUsersDir = "users"

// imageUseName is the name of the box's link in the image's users directory: stable for a Dir,
// so that a restarted or woken box registers again in place.
func imageUseName(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return hex.EncodeToString(sum[:8])
}

// registerImageUse records the box as a user of its image, before its overlay is mounted, and
// marks the image used now (build.sh spares an image used within the hour). The link goes in
// first and the image is looked for afterwards: build.sh checks the links again after moving an
// image out of the way and puts it back if one appeared, so a box that registered either finds
// its image or fails to start saying it is gone. An image built before registration has no users
// directory and is never pruned; it gets none here, since the hibernated boxes of older engines
// that still need it have no links, and a first link would make it prunable under them. The
// image's directory itself is never created: a pruned image must stay gone, not come back as an
// empty directory that looks like a cached version.
func registerImageUse(spec Spec) error {
	users := filepath.Join(filepath.Dir(spec.Rootfs), imageUsersDir)
	if fi, err := os.Stat(users); err != nil || !fi.IsDir() {
		if _, err := os.Stat(spec.Rootfs); err != nil {
			return fmt.Errorf("register image use: image %s is gone: %w", spec.Rootfs, err)
		}
		return nil // built before registration: kept for good
	}
	link := filepath.Join(users, imageUseName(spec.Dir))
	if target, err := os.Readlink(link); err != nil || target != spec.Dir {
		// A link of the same name to another Dir (a hash collision, or a hand-made link) is
		// replaced atomically; the temporary name is per process so engines starting boxes at once
		// do not trip on each other.
		tmp := link + ".tmp" + strconv.Itoa(os.Getpid())
		_ = os.Remove(tmp)
		if err := os.Symlink(spec.Dir, tmp); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("register image use: image %s is gone: %w", spec.Rootfs, err)
			}
			return fmt.Errorf("register image use: %w", err)
		}
		if err := os.Rename(tmp, link); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("register image use: %w", err)
		}
	}
	now := time.Now()
	if err := os.Chtimes(users, now, now); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("register image use: %w", err)
	}
	if _, err := os.Stat(spec.Rootfs); err != nil {
		return fmt.Errorf("register image use: image %s is gone (pruned while the box started?): %w",
			spec.Rootfs, err)
	}
	return nil
}
