package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/loomhand/cocoonbox/image/boxinit/boxproto"
)

// initDialTimeout covers a box whose init has not bound its socket yet (just started or just
// restored).
const initDialTimeout = 10 * time.Second

// relayInit pipes stdio to the init's socket: the engine's exec channel.
func relayInit() error {
	if err := shedAdmin(); err != nil {
		return relayFailed(err)
	}
	c, err := dialInit()
	if err != nil {
		return relayFailed(err)
	}
	return pipe(c)
}

// dialInit connects to the init's socket, waiting for an init that has not bound it yet.
func dialInit() (net.Conn, error) {
	deadline := time.Now().Add(initDialTimeout)
	for {
		c, err := net.Dial("unix", boxproto.SocketName)
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("dial init: %w", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// relayTCP pipes stdio to 127.0.0.1:port: the ports relay.
func relayTCP(port string) error {
	if err := shedAdmin(); err != nil {
		return relayFailed(err)
	}
	c, err := dialTCP(port)
	if err != nil {
		return relayFailed(err)
	}
	return pipe(c)
}

// dialTCP connects to 127.0.0.1:port inside the box.
func dialTCP(port string) (net.Conn, error) {
	n, err := strconv.Atoi(port)
	if err != nil || n <= 0 || n > 65535 {
		return nil, fmt.Errorf("bad port %q", port)
	}
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		return nil, fmt.Errorf("dial 127.0.0.1:%d: %w", n, err)
	}
	return c, nil
}

func relayFailed(err error) error {
	_, _ = os.Stdout.Write(append([]byte{boxproto.RelayFailed}, err.Error()...))
	return err
}

// readerOnly and writerOnly hide ReadFrom/WriteTo so io.Copy does plain reads and writes:
// sendfile/splice on a donated host socket gain nothing and are one more thing to go wrong.
type readerOnly struct{ io.Reader }
type writerOnly struct{ io.Writer }

// pipe copies stdin → c and c → stdout, passing each EOF on with shutdown(2). stdin and stdout
// are the two ends the engine gave `runsc exec` (one host socket), so shutting down fd 1 for
// writing is what the engine reads as EOF; closing it would not be, since runsc holds a copy.
func pipe(c net.Conn) error {
	// A write to an engine that has gone must fail with EPIPE, not kill the relay before it has
	// forwarded what the engine wrote before leaving.
	signal.Ignore(syscall.SIGPIPE)
	if _, err := os.Stdout.Write([]byte{boxproto.RelayOK}); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	toBox, fromBox := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = io.CopyBuffer(writerOnly{c}, readerOnly{os.Stdin}, make([]byte, 256<<10))
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		close(toBox)
	}()
	go func() {
		if _, err := io.CopyBuffer(writerOnly{os.Stdout}, readerOnly{c}, make([]byte, 256<<10)); err == nil {
			if err := syscall.Shutdown(1, syscall.SHUT_WR); err != nil {
				_ = os.Stdout.Close()
			}
		}
		close(fromBox)
	}()
	go func() {
		// Both directions of the engine's socket are shut: once the engine's last bytes are
		// forwarded nothing more can pass, whatever the box's side still does. Without this a
		// server that never closes would keep the relay, and its host socket, alive forever.
		waitHangup()
		<-toBox
		os.Exit(0)
	}()
	<-toBox
	<-fromBox
	return nil
}

// waitHangup returns when the engine's socket reports POLLHUP: its read and write sides are
// both shut down (the engine closed it, or half-closed it after the relay did). A relay left
// behind would hold a host socket in the box and make the next checkpoint fail.
func waitHangup() {
	fds := []unix.PollFd{{Fd: 1, Events: unix.POLLHUP}}
	for {
		n, err := unix.Poll(fds, -1)
		if err == unix.EINTR || (err == nil && n == 0) {
			continue
		}
		if err != nil || fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			return
		}
	}
}
