package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loomhand/cocoonbox/internal/engine/runtime"
)

const switchingProtocols = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: tcp\r\nConnection: Upgrade\r\n\r\n"

// handleRelay turns the request's connection into a raw byte pipe to 127.0.0.1:{port} inside
// the sandbox. The Upgrade header is checked before anything else, so a bare GET (a crawler, a
// health probe) answers 426 and never wakes a hibernated sandbox. While open, the relay holds
// the sandbox awake; hibernate and release close it first.
func (e *Engine) handleRelay(w http.ResponseWriter, r *http.Request) error {
	if !headerHas(r.Header, "Upgrade", "tcp") || !headerHas(r.Header, "Connection", "upgrade") {
		return newError(kindUpgradeRequired, "the ports relay needs the headers Upgrade: tcp and Connection: Upgrade")
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return invalid("port: must be a number from 1 to 65535, got %q", r.PathValue("port"))
	}
	b, err := e.authorizeBox(r, false)
	if err != nil {
		return err
	}

	p := &pipe{}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	done, err := e.use(ctx, b, "relay", func() { cancel(); p.close() })
	if err != nil {
		return err
	}
	defer done()
	guest, err := e.rt.Dial(ctx, b.rec.ID, port)
	if errors.Is(err, runtime.ErrPortClosed) {
		return &apiError{kind: kindBadGateway, msg: fmt.Sprintf("nothing listens on port %d in the sandbox", port), err: err}
	}
	if err != nil {
		return e.runtimeError(ctx, b, "dial", err)
	}
	client, buffered, err := hijack(w)
	if err != nil {
		_ = guest.Close()
		return err
	}
	if !p.set(client, guest) { // preempted between Dial and here
		return nil
	}
	if _, err := io.WriteString(client, switchingProtocols); err != nil {
		p.close()
		return nil
	}
	var fromClient io.Reader = client // a bare conn lets io.Copy splice(2) between sockets
	if len(buffered) > 0 {
		fromClient = io.MultiReader(bytes.NewReader(buffered), client)
	}
	e.metrics.relayOpened()
	up, down := p.splice(fromClient)
	e.metrics.relayClosed(up, down)
	return nil
}

// headerHas reports whether a comma-separated header holds token, ignoring case.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for part := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}

// hijack takes over the client connection, returning any bytes the server had already read
// past the request head (a client may send data right behind its upgrade request).
func hijack(w http.ResponseWriter) (net.Conn, []byte, error) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, fmt.Errorf("hijack relay connection: %w", err)
	}
	_ = conn.SetDeadline(time.Time{}) // the server's read timeouts no longer apply to a pipe
	var buffered []byte
	if n := brw.Reader.Buffered(); n > 0 {
		buffered, _ = brw.Reader.Peek(n)
		buffered = bytes.Clone(buffered)
	}
	return conn, buffered, nil
}

// pipe is the two ends of one relay; close ends it from outside (hibernate, release, Close).
type pipe struct {
	mu     sync.Mutex
	client net.Conn
	guest  runtime.HalfCloser
	closed bool
}

// set records both ends; false (and both closed) when the pipe was closed before they arrived.
func (p *pipe) set(client net.Conn, guest runtime.HalfCloser) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.client, p.guest = client, guest
	if p.closed {
		_ = client.Close()
		_ = guest.Close()
		return false
	}
	return true
}

func (p *pipe) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.client != nil {
		_ = p.client.Close()
	}
	if p.guest != nil {
		_ = p.guest.Close()
	}
}

// splice copies both ways until both sides are done. An end of input on one side is passed on
// as a half-close, so a client can send EOF and still read the answer (and the other way
// round); an error on either side ends the whole pipe.
func (p *pipe) splice(fromClient io.Reader) (up, down int64) {
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		up, err = io.Copy(p.guest, fromClient)
		if err != nil {
			p.close()
			return
		}
		_ = p.guest.CloseWrite()
	})
	wg.Go(func() {
		var err error
		down, err = io.Copy(p.client, p.guest)
		if err != nil {
			p.close()
			return
		}
		if cw, ok := p.client.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	})
	wg.Wait()
	p.close()
	return up, down
}

// handleAgent answers the optional upstream agent relay, which this engine does not have;
// GET /v1/info says so too (agent_relay: false).
func (e *Engine) handleAgent(http.ResponseWriter, *http.Request) error {
	return newError(kindNotImplemented, "the local engine has no agent relay; use the ports relay")
}
