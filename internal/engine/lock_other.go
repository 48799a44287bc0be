//go:build !unix

package engine

// lockDir is a no-op where POSIX record locks do not exist; the engine runs on Linux.
func lockDir(string) (func(), error) { return func() {}, nil }
