// Package buildinfo carries the version stamped into binaries at link time, so every role and
// the in-box agent report the same version string.
package buildinfo

import "runtime/debug"

// Version is set with -ldflags "-X github.com/loomhand/cocoonbox/internal/buildinfo.Version=…".
var Version = "dev"

// String returns the version with the VCS revision when the toolchain recorded one.
func String() string {
	v := Version
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 && v == "dev" {
				v += "+" + s.Value[:12]
			}
		}
	}
	return v
}
