package s3server

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// parseAddr accepts only loopback addresses: the dev server trusts anyone who
// holds its keys, and those keys sit in a file on this machine.
func parseAddr(addr string) (host, port string, auto bool, err error) {
	if addr == "" {
		addr = DefaultAddr
	}
	host, port, err = net.SplitHostPort(addr)
	if err != nil {
		return "", "", false, fmt.Errorf("parse addr %q: %w", addr, err)
	}
	if host == "localhost" {
		// versitygw would bind every address localhost resolves to.
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "", "", false, fmt.Errorf("addr %q: host must be a loopback IP such as 127.0.0.1", addr)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", "", false, fmt.Errorf("addr %q: port must be a number from 0 to 65535", addr)
	}
	return host, port, n == 0, nil
}

// reservePort checks that host:port can be bound and returns the concrete
// address, resolving port 0 to a free port. versitygw binds by address
// string, not by listener, so the port is released again before it binds;
// Start retries an auto-picked port that is lost in between.
func reservePort(host, port string) (string, error) {
	addr := net.JoinHostPort(host, port)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", listenError(addr, err)
	}
	bound := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("release port %s: %w", bound, err)
	}
	return bound, nil
}

// listenError gives one clear line, "s3: listen 127.0.0.1:8421: address
// already in use", instead of net's nested "listen tcp ...: bind: ..." chain,
// while keeping the errno for errors.Is.
func listenError(addr string, err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return fmt.Errorf("s3: listen %s: %w", addr, errno)
	}
	return fmt.Errorf("s3: listen %s: %w", addr, err)
}
