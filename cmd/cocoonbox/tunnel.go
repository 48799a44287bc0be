package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/coder/websocket"
)

// serveTunnels hands every connection ln accepts to handle, until ctx ends; a connection's
// failure goes to failed and ends only that connection.
func serveTunnels(ctx context.Context, ln net.Listener, handle func(net.Conn) error, failed func(error)) error {
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() {
			if err := handle(conn); err != nil {
				failed(err)
			}
		}()
	}
}

// tunnel relays one local TCP connection (a box port's client) to an edge of the API.
func tunnel(ctx context.Context, conn net.Conn, edge, token string) error {
	defer conn.Close()
	nc, err := dialEdge(ctx, edge, token)
	if err != nil {
		return err
	}
	defer nc.Close()
	return relay(conn, nc)
}

// dialEdge opens a WebSocket to an edge of the API, which authenticates it with the bearer
// token and applies its rules, and returns its binary messages as a stream.
func dialEdge(ctx context.Context, edge, token string) (net.Conn, error) {
	ws, resp, err := websocket.Dial(ctx, edge, &websocket.DialOptions{
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + token}},
		Subprotocols: []string{"binary"},
	})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("the edge refused: %s", edgeRefusal(resp))
		}
		return nil, err
	}
	ws.SetReadLimit(-1)
	return websocket.NetConn(ctx, ws, websocket.MessageBinary), nil
}

// relay copies between a local connection and the edge's until either side ends; the caller
// closes both.
func relay(conn, edge net.Conn) error {
	errc := make(chan error, 2)
	go func() { _, err := io.Copy(edge, conn); errc <- err }()
	go func() { _, err := io.Copy(conn, edge); errc <- err }()
	return edgeClosed(<-errc)
}

// edgeClosed is err with the edge's reason when the edge closed the WebSocket other than
// normally, and nil when it closed normally or the local side ended.
func edgeClosed(err error) error {
	var ce websocket.CloseError
	if errors.As(err, &ce) && ce.Code != websocket.StatusNormalClosure {
		return fmt.Errorf("closed by the edge: %s", ce.Reason)
	}
	return nil
}

// edgeRefusal is what an edge said when it refused an upgrade: its {"error": {"message"}} (the
// API's HTTP error body), else the status.
func edgeRefusal(resp *http.Response) string {
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if resp.Body != nil {
		if b, err := io.ReadAll(io.LimitReader(resp.Body, 1024)); err == nil && json.Unmarshal(b, &body) == nil && body.Error.Message != "" {
			return body.Error.Message
		}
	}
	return resp.Status
}
