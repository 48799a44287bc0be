//go:build !linux

package runtime

import (
	"errors"
	"os"
)

// errLinuxOnly: boxes need Linux (gVisor or namespaces); these stubs keep the package building
// elsewhere so the engine's other code can be vetted and unit-tested on any OS.
var errLinuxOnly = errors.New("box runtimes need Linux")

func mountOverlay(Spec) error                 { return errLinuxOnly }
func unmountOverlay(string) error             { return nil }
func mounted(string) bool                     { return false }
func unmountLazy(string) error                { return errLinuxOnly }
func socketPair() (*os.File, *os.File, error) { return nil, nil, errLinuxOnly }

func mountDisk(string) error                  { return errLinuxOnly }
func volumesSupported() error                 { return errLinuxOnly }
func volumeUsage(string) (int64, int64, bool) { return 0, 0, false }
func makeVolume(string, int) error            { return errLinuxOnly }
