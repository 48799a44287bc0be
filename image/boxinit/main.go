// Command cocoonbox-init is the PID 1 of every cocoonbox box and the relay the engine runs in a
// box to reach it. image/build.sh compiles it statically and installs it into every image at
// boxproto.InitPath, so it needs nothing from the image but a kernel (gVisor's or the host's).
//
// Why an init of our own and not `sleep infinity`: gVisor kills every process descended from
// `runsc exec` when it restores a checkpoint (the exec caller is gone), so a process a user
// started through exec would not survive hibernate/wake. Commands are therefore spawned by this
// init, whose descendants are restored like any container process; it also reaps orphans.
//
// Usage:
//
//	cocoonbox-init              serve as the box's init (PID 1)
//	cocoonbox-init relay init   pipe stdio to the init's socket (the engine's exec channel)
//	cocoonbox-init relay tcp N  pipe stdio to 127.0.0.1:N inside the box (the ports relay)
//	cocoonbox-init relay mux    serve many relays over stdio, one yamux stream each (see relayMux)
//	cocoonbox-init credential PATH  write $COCOONBOX_CRED to PATH (the init runs it itself)
//	cocoonbox-init reseed [HOSTNAME]  give a forked box an identity of its own (see reseed)
//
// A relay reports boxproto.RelayOK or RelayFailed as its first output byte, then passes bytes
// both ways and passes EOF each way with shutdown(2), so half-close works through it.
package main

import (
	"fmt"
	"os"
)

func main() {
	args := os.Args[1:]
	var err error
	switch {
	case len(args) == 0 || (len(args) == 1 && args[0] == "init"):
		err = serveInit()
	case len(args) == 2 && args[0] == "relay" && args[1] == "init":
		err = relayInit()
	case len(args) == 3 && args[0] == "relay" && args[1] == "tcp":
		err = relayTCP(args[2])
	case len(args) == 2 && args[0] == "relay" && args[1] == "mux":
		err = relayMux()
	case len(args) == 2 && args[0] == "credential":
		err = credentialCommand(args[1])
	case len(args) == 1 && args[0] == "reseed":
		err = reseed("")
	case len(args) == 2 && args[0] == "reseed":
		err = reseed(args[1])
	default:
		err = fmt.Errorf("usage: cocoonbox-init [init | relay init | relay tcp PORT | relay mux | credential PATH | reseed [HOSTNAME]]")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cocoonbox-init:", err)
		os.Exit(1)
	}
}
