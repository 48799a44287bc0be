package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// relayMux serves many relays over one pair of stdio: the engine opens a yamux stream per
// connection, names its target in the stream's first line, and reads the same status byte a
// single relay writes. One runsc exec then serves every connection to the box while it runs,
// where each connection cost one (about 40 ms of CPU). It returns when the engine ends the
// session, which it does before any checkpoint: this process holds the engine's host socket.
func relayMux() error {
	if err := shedAdmin(); err != nil {
		return relayFailed(err)
	}
	signal.Ignore(syscall.SIGPIPE)
	if _, err := os.Stdout.Write([]byte{boxproto.RelayOK}); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	sess, err := yamux.Server(stdio{}, boxproto.MuxConfig())
	if err != nil {
		return fmt.Errorf("start mux: %w", err)
	}
	defer func() { _ = sess.Close() }()
	for {
		st, err := sess.Accept()
		if err != nil {
			return nil // the engine closed the session (or its process went)
		}
		go serveStream(st)
	}
}

// serveStream connects one stream to the target its first line names ("init" or "tcp PORT")
// and pipes both ways, passing each EOF on, as a single relay does.
func serveStream(st net.Conn) {
	defer func() { _ = st.Close() }()
	_ = st.SetReadDeadline(time.Now().Add(initDialTimeout))
	line, err := bufio.NewReaderSize(io.LimitReader(st, boxproto.MaxMuxTarget), boxproto.MaxMuxTarget).ReadString('\n')
	_ = st.SetReadDeadline(time.Time{})
	if err != nil {
		return
	}
	c, err := dialTarget(strings.Fields(line))
	if err != nil {
		_, _ = st.Write(append([]byte{boxproto.RelayFailed}, err.Error()...))
		return
	}
	defer func() { _ = c.Close() }()
	if _, err := st.Write([]byte{boxproto.RelayOK}); err != nil {
		return
	}
	toBox := make(chan struct{})
	go func() {
		_, _ = io.CopyBuffer(c, st, make([]byte, 256<<10))
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		close(toBox)
	}()
	_, _ = io.CopyBuffer(st, c, make([]byte, 256<<10))
	_ = st.Close() // a yamux Close is a half-close: the engine reads EOF, and may still write
	<-toBox
}

// dialTarget connects to what a relay's arguments name: the init's socket or a port on the box's
// loopback.
func dialTarget(target []string) (net.Conn, error) {
	switch {
	case len(target) == 1 && target[0] == "init":
		return dialInit()
	case len(target) == 2 && target[0] == "tcp":
		return dialTCP(target[1])
	}
	return nil, fmt.Errorf("unknown relay target %q", strings.Join(target, " "))
}

// stdio is the engine's socket as the relay's stdin and stdout.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdio) Close() error {
	_ = os.Stdin.Close()
	return os.Stdout.Close()
}
