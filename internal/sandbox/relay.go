package sandbox

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// The ports relay is an HTTP/1.1 Upgrade: GET /v1/sandboxes/{id}/ports/{port} with "Upgrade: tcp"
// and "Connection: Upgrade", answered "101 Switching Protocols", after which the connection is a
// raw byte pipe to the sandbox's 127.0.0.1:{port}. net/http's client can upgrade, but the body it
// returns cannot half-close, and half-close is part of the contract (a client sends EOF and keeps
// reading the answer). So DialPort speaks the upgrade itself on a connection it owns. It does not
// go through HTTP proxies.

// DialPort implements Client.
func (c *HTTP) DialPort(ctx context.Context, sb SandboxRef, port int) (Conn, error) {
	op := "dial port " + strconv.Itoa(port) + " of " + sb.ID
	u, err := c.nodeURL(sb.Addr)
	if err != nil {
		return nil, err
	}
	hostport := u.Host
	if u.Port() == "" {
		hostport = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	raw, err := c.dialContext()(ctx, "tcp", hostport)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %s: %w", op, err)
	}
	conn, err := c.upgrade(ctx, op, raw, u.Scheme == "https", u.Hostname(), u.String()+sandboxPath(sb.ID, "ports/"+strconv.Itoa(port)), c.sandboxToken(sb))
	if err != nil {
		_ = raw.Close()
		return nil, err
	}
	return conn, nil
}

// upgrade runs the TLS handshake (for https) and the HTTP upgrade on raw, bounded by ctx.
func (c *HTTP) upgrade(ctx context.Context, op string, raw net.Conn, secure bool, host, target, token string) (Conn, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	// Cancelling ctx must interrupt a handshake blocked on a silent server.
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	var conn net.Conn = raw
	if secure {
		cfg := c.tlsConfig()
		if cfg.ServerName == "" {
			cfg.ServerName = host
		}
		cfg.NextProtos = []string{"http/1.1"} // an upgrade is an HTTP/1.1 thing
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			stop()
			return nil, fmt.Errorf("sandbox: %s: tls handshake: %w", op, err)
		}
		conn = tc
	}
	req, err := http.NewRequest(http.MethodGet, target, nil)
	if err != nil {
		stop()
		return nil, fmt.Errorf("sandbox: %s: %w", op, err)
	}
	req.Header.Set("Upgrade", "tcp")
	req.Header.Set("Connection", "Upgrade")
	setBearer(req.Header, token)
	br := bufio.NewReader(conn)
	var resp *http.Response
	if err = req.Write(conn); err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() || ctx.Err() != nil {
		return nil, fmt.Errorf("sandbox: %s: %w", op, context.Cause(ctx))
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: %s: %w", op, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer func() { _ = resp.Body.Close() }()
		return nil, statusError(op, resp)
	}
	_ = raw.SetDeadline(time.Time{})
	return &relayConn{Conn: conn, br: br}, nil
}

// dialContext is the transport's dialer when the injected client has one, so tests and custom
// networks apply to the relay too.
func (c *HTTP) dialContext() func(ctx context.Context, network, addr string) (net.Conn, error) {
	if t, ok := c.hc.Transport.(*http.Transport); ok && t.DialContext != nil {
		return t.DialContext
	}
	return (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
}

func (c *HTTP) tlsConfig() *tls.Config {
	if t, ok := c.hc.Transport.(*http.Transport); ok && t.TLSClientConfig != nil {
		return t.TLSClientConfig.Clone()
	}
	return &tls.Config{MinVersion: tls.VersionTLS12}
}

// relayConn is an upgraded connection. Bytes the engine sent right behind the 101 answer sit in
// br's buffer and are read first; then reads go straight to the connection.
type relayConn struct {
	net.Conn
	br *bufio.Reader // nil once drained
}

// Read implements net.Conn.
func (r *relayConn) Read(p []byte) (int, error) {
	if r.br != nil {
		if r.br.Buffered() > 0 {
			return r.br.Read(p)
		}
		r.br = nil
	}
	return r.Conn.Read(p)
}

// CloseWrite sends EOF to the sandbox's side while reads go on: a TCP FIN, or a TLS close_notify
// (which a Go TLS server reads as EOF) on https.
func (r *relayConn) CloseWrite() error {
	if cw, ok := r.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("sandbox: close write of %T: %w", r.Conn, errors.ErrUnsupported)
}
