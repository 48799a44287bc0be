//go:build !linux

package main

import "errors"

// errLinuxOnly: boxes are Linux (gVisor or namespaces); the stubs keep `GOOS=darwin go vet` clean.
var errLinuxOnly = errors.New("cocoonbox-init runs only on Linux")

func serveInit() error           { return errLinuxOnly }
func relayInit() error           { return errLinuxOnly }
func relayTCP(port string) error { return errLinuxOnly }
func relayMux() error            { return errLinuxOnly }
func setHostname(string) error   { return errLinuxOnly }
